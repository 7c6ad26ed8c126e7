package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// shape is how the entries of a raw floor are laid out.
type shape struct {
	name string
	// parents is the number of parent IDs the entries are spread over.
	parents int
	// namespaces is the number of k8s:ns selector values they are spread
	// over; 0 gives each entry a single selector of its own (k8s:pod-uid).
	namespaces int
}

// entry returns entry i of the shape.
func (s shape) entry(i int) *types.Entry {
	e := &types.Entry{
		SpiffeId:    &types.SPIFFEID{TrustDomain: trustDomain, Path: fmt.Sprintf("/ns/ns-%d/sa/w-%d", i%max(s.namespaces, 1), i)},
		ParentId:    &types.SPIFFEID{TrustDomain: trustDomain, Path: fmt.Sprintf("/spire/agent/k8s_psat/shape/node-%d", i%s.parents)},
		X509SvidTtl: 3600,
	}
	if s.namespaces == 0 {
		e.Selectors = []*types.Selector{{Type: "k8s", Value: fmt.Sprintf("pod-uid:00000000-0000-0000-0000-%012d", i)}}
		return e
	}
	e.Selectors = []*types.Selector{
		{Type: "k8s", Value: fmt.Sprintf("ns:ns-%d", i%s.namespaces)},
		{Type: "k8s", Value: fmt.Sprintf("sa:w-%d", i)},
	}
	return e
}

// BenchmarkSpireShapes measures how SPIRE's cost of writing an entry grows
// with the entries already there, by their shape: n entries (BENCH_SHAPES_N,
// default 10000, 1000 with QUICK) are created on a fresh server per shape in
// batches of 50, one call at a time, and the time of every step of
// BENCH_SHAPES_STEP entries (default 2000, 500 with QUICK) is printed. The
// shapes: one parent or 100, all entries sharing one k8s:ns selector or
// each in a namespace of its own, and one k8s:pod-uid selector per entry
// over 100 parents (one entry per pod over per-node parents). Use
// -benchtime 1x.
func BenchmarkSpireShapes(b *testing.B) {
	n, step := 10000, 2000
	if quick() {
		n, step = 1000, 500
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_SHAPES_N")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("BENCH_SHAPES_STEP")); err == nil && v > 0 {
		step = v
	}
	shapes := []shape{
		{name: "1 parent, shared k8s:ns", parents: 1, namespaces: 1},
		{name: "1 parent, distinct k8s:ns", parents: 1, namespaces: n},
		{name: "100 parents, shared k8s:ns", parents: 100, namespaces: 1},
		{name: "100 parents, distinct k8s:ns", parents: 100, namespaces: n},
		{name: "100 parents, one k8s:pod-uid", parents: 100, namespaces: 0},
	}
	for range b.N {
		rep := &report{}
		rep.add("# SPIRE write cost by entry shape, %s: %d entries per shape in batches of 50, one call at a time, fresh server (sqlite, INFO) per shape",
			time.Now().UTC().Format(time.RFC3339), n)
		for _, s := range shapes {
			load := loadAvg()
			steps, err := stepTimes(context.Background(), s, n, step)
			if err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			parts := make([]string, len(steps))
			for i, d := range steps {
				total += d
				parts[i] = fmt.Sprintf("%d-%d: %.2f ms/entry", i*step, min((i+1)*step, n), float64(d.Microseconds())/1000/float64(min(step, n-i*step)))
			}
			rep.add("%-30s total %s, load %s; %s", s.name, total.Round(time.Millisecond), load, strings.Join(parts, ", "))
		}
		if err := rep.write(os.Getenv("BENCH_SHAPES_OUT")); err != nil {
			b.Fatal(err)
		}
	}
}

// stepTimes creates n entries of shape s on a fresh server and returns the
// time of each step of step entries.
func stepTimes(ctx context.Context, s shape, n, step int) ([]time.Duration, error) {
	srv, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: trustDomain, LogLevel: "INFO"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Cleanup() }()
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return nil, err
	}
	defer func() { _ = closer.Close() }()
	api := spire.NewClient(conn, spire.Options{BatchSize: 50, Concurrency: 1})
	var out []time.Duration
	for lo := 0; lo < n; lo += step {
		in := make([]*types.Entry, 0, step)
		for i := lo; i < min(lo+step, n); i++ {
			in = append(in, s.entry(i))
		}
		start := time.Now()
		res, err := api.Create(ctx, in)
		out = append(out, time.Since(start))
		if err != nil {
			return nil, err
		}
		for _, r := range res {
			if r.Code != codes.OK {
				return nil, fmt.Errorf("%s: create: %s %s", s.name, r.Code, r.Message)
			}
		}
	}
	return out, nil
}
