package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// build is one operator binary BenchmarkEventLatency compares.
type build struct {
	name, bin string
}

// latencySettings are the settings of BenchmarkEventLatency, from the
// environment: BENCH_LATENCY_N (default 10000 Deployments),
// BENCH_LATENCY_BUILDS (name=binary,name=binary; default the binary built
// from this tree alone), BENCH_LATENCY_ROUNDS (default 3 rounds of every
// build) and BENCH_SAMPLES (default 100 per measure and phase).
type latencySettings struct {
	n, rounds, samples int
	builds             []build
}

func loadLatencySettings() latencySettings {
	s := latencySettings{n: 10000, rounds: 3, samples: 100}
	for env, v := range map[string]*int{"BENCH_LATENCY_N": &s.n, "BENCH_LATENCY_ROUNDS": &s.rounds, "BENCH_SAMPLES": &s.samples} {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*v = n
		}
	}
	for _, f := range strings.Split(os.Getenv("BENCH_LATENCY_BUILDS"), ",") {
		if name, bin, ok := strings.Cut(strings.TrimSpace(f), "="); ok {
			s.builds = append(s.builds, build{name: name, bin: bin})
		}
	}
	return s
}

// BenchmarkEventLatency times the event pass as a user sees it (one new
// Deployment to its entry, one changed Deployment to its entry replaced)
// at one size, for one or more operator builds in turn, all against the
// same kube-apiserver and the same spire-server holding the same entries:
// one build converges the policy, then each round runs every build in
// order (stop the last process, start the next, wait for its first pass to
// find everything registered, take the samples). Alternating builds in one
// window is what makes their figures comparable on a shared machine. Each
// phase also times SPIRE alone creating one entry of the operator's shape
// under the operator's parent, and one under an empty parent, so the part
// of the latency that is SPIRE's write is known. Use -benchtime 1x.
func BenchmarkEventLatency(b *testing.B) {
	for range b.N {
		if err := runEventLatency(b, loadLatencySettings()); err != nil {
			b.Fatal(err)
		}
	}
}

// phase is one build's samples in one round.
type phase struct {
	build                 string
	round                 int
	load                  string
	newEntry, changed     []time.Duration
	gone, spireOwn, spire []time.Duration
	// newCalls and changedCalls are the operator's SPIRE calls and API
	// writes per sample of each measure.
	newCalls, changedCalls counters
}

// perSample returns the counters from a to b divided by n.
func perSample(a, b counters, n int) counters {
	return counters{spireCalls: (b.spireCalls - a.spireCalls) / float64(n), apiWrites: (b.apiWrites - a.apiWrites) / float64(n)}
}

func runEventLatency(b *testing.B, s latencySettings) error {
	ctx := context.Background()
	rep := &report{}
	cp, k8s, bin, err := startBench(b)
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	if len(s.builds) == 0 {
		s.builds = []build{{name: "this tree", bin: bin}}
	}
	rep.add("# spiffe-operator event latency, %s: %d Deployments (no pods), builds %s, %d rounds, %d samples per measure and phase, SPIRE at INFO",
		time.Now().UTC().Format(time.RFC3339), s.n, buildNames(s.builds), s.rounds, s.samples)

	ns := fmt.Sprintf("latency-%d", s.n)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	if err := createDeployments(ctx, k8s, ns, "w", s.n); err != nil {
		return err
	}
	srv, proc, policy, d, err := converge1(ctx, k8s, cp.KubeconfigPath, s.builds[0].bin, ns, ns, s.n)
	if err != nil {
		return err
	}
	defer func() { _ = srv.Cleanup() }()
	rep.add("converge (%s): %s, load %s", s.builds[0].name, d.Round(time.Millisecond), loadAvg())
	prefix, err := proc.entryIDPrefix()
	if err != nil {
		proc.stop()
		return err
	}
	proc.stop()

	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	entryClient := entryv1.NewEntryClient(conn)
	api := spire.NewClient(conn, spire.Options{})
	ids := entries.IDScheme{Prefix: prefix}
	tag := entries.OwnerTag(policy.UID)

	var phases []phase
	for r := range s.rounds {
		// Each round starts with another build, so no build always runs
		// first (on the smallest table) or last.
		order := append(slices.Clone(s.builds[r%len(s.builds):]), s.builds[:r%len(s.builds)]...)
		for _, bd := range order {
			ph, err := runPhase(ctx, k8s, cp.KubeconfigPath, srv.SocketPath, bd, prefix, entryClient, api, ids, tag, ns, s, r, len(phases))
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", bd.name, r+1, err)
			}
			phases = append(phases, ph)
			rep.add("round %d %-10s load %s | new p50 %s p99 %s (%.2f SPIRE calls, %.2f API writes each) | changed p50 %s p99 %s (%.2f SPIRE calls, %.2f API writes each) | old gone p50 %s p99 %s | "+
				"SPIRE alone, one create of the same shape: under its parent p50 %s p99 %s, under an empty parent (same k8s:ns) p50 %s",
				r+1, bd.name, ph.load, pct(ph.newEntry, 50), pct(ph.newEntry, 99), ph.newCalls.spireCalls, ph.newCalls.apiWrites,
				pct(ph.changed, 50), pct(ph.changed, 99), ph.changedCalls.spireCalls, ph.changedCalls.apiWrites,
				pct(ph.gone, 50), pct(ph.gone, 99), pct(ph.spireOwn, 50), pct(ph.spireOwn, 99), pct(ph.spire, 50))
		}
	}
	for _, bd := range s.builds {
		var newAll, changedAll []time.Duration
		var newP50, changedP50 []time.Duration
		for _, ph := range phases {
			if ph.build != bd.name {
				continue
			}
			newAll, changedAll = append(newAll, ph.newEntry...), append(changedAll, ph.changed...)
			newP50, changedP50 = append(newP50, pct(ph.newEntry, 50)), append(changedP50, pct(ph.changed, 50))
		}
		slices.Sort(newAll)
		slices.Sort(changedAll)
		slices.Sort(newP50)
		slices.Sort(changedP50)
		rep.add("%-10s all rounds (%d samples each): new p50 %s p99 %s (round p50s %s .. %s) | changed p50 %s p99 %s (round p50s %s .. %s)",
			bd.name, len(newAll), pct(newAll, 50), pct(newAll, 99), newP50[0], newP50[len(newP50)-1],
			pct(changedAll, 50), pct(changedAll, 99), changedP50[0], changedP50[len(changedP50)-1])
	}
	return rep.write(os.Getenv("BENCH_OUT"))
}

// runPhase starts build bd against the converged server, waits until its
// first pass has found the policy's entries, and takes the samples of
// phase number seq (which names its Deployments and service accounts).
func runPhase(ctx context.Context, k8s client.WithWatch, kubeconfig, socket string, bd build, prefix string,
	c entryv1.EntryClient, api *spire.Client, ids entries.IDScheme, tag, ns string, s latencySettings, round, seq int) (phase, error) {
	ph := phase{build: bd.name, round: round + 1, load: loadAvg()}
	proc, err := startOperator(bd.bin, kubeconfig, socket)
	if err != nil {
		return ph, err
	}
	defer proc.stop()
	if err := proc.waitReady(ctx); err != nil {
		return ph, err
	}
	if p, err := proc.entryIDPrefix(); err != nil || p != prefix {
		return ph, fmt.Errorf("entry ID prefix %q (%v), want %q", p, err, prefix)
	}
	// Its first pass is a full one: wait for it, by a change it must
	// handle after it (an incremental pass needs a full one first).
	if _, err := timeNew(ctx, k8s, c, ids, tag, ns, fmt.Sprintf("warm-%d", seq), 2*time.Minute); err != nil {
		return ph, fmt.Errorf("first pass: %w", err)
	}
	m0, err := proc.settle(10 * time.Second)
	if err != nil {
		return ph, err
	}
	for j := range s.samples {
		d, err := timeNew(ctx, k8s, c, ids, tag, ns, fmt.Sprintf("new-%d-%d", seq, j), 30*time.Second)
		if err != nil {
			return ph, err
		}
		ph.newEntry = append(ph.newEntry, d)
	}
	slices.Sort(ph.newEntry)
	m1, err := proc.settle(10 * time.Second)
	if err != nil {
		return ph, err
	}
	ph.newCalls = perSample(m0, m1, s.samples)
	if ph.changed, ph.gone, err = measureReplace(ctx, k8s, c, ids, tag, ns, s.n, s.samples, fmt.Sprintf("-m%d", seq)); err != nil {
		return ph, err
	}
	m2, err := proc.settle(10 * time.Second)
	if err != nil {
		return ph, err
	}
	ph.changedCalls = perSample(m1, m2, s.samples)
	if ph.spireOwn, err = rawCreatesUnder(ctx, api, ns, parentID, fmt.Sprintf("raw-%d", seq), 20); err != nil {
		return ph, err
	}
	ph.spire, err = rawCreatesUnder(ctx, api, ns, fmt.Sprintf("spiffe://%s/spire/agent/k8s_psat/raw-%d", trustDomain, seq), "raw", 20)
	return ph, err
}

// timeNew creates Deployment name (service account name) and times it to
// its entry readable in SPIRE.
func timeNew(ctx context.Context, k8s client.WithWatch, c entryv1.EntryClient, ids entries.IDScheme, tag, ns, name string, timeout time.Duration) (time.Duration, error) {
	e := benchEntry(ns, name)
	id := ids.EntryID(tag, e.Key())
	t0 := time.Now()
	if err := k8s.Create(ctx, deployment(ns, name, name)); err != nil {
		return 0, err
	}
	if err := waitEntry(ctx, c, id, timeout); err != nil {
		return 0, fmt.Errorf("entry of %s: %w", name, err)
	}
	return time.Since(t0), nil
}

// rawCreatesUnder times k single-entry creates straight against SPIRE, of
// entries of the operator's shape (k8s:ns:<ns> and k8s:sa:<prefix>-<j>)
// under parent, sorted.
func rawCreatesUnder(ctx context.Context, api *spire.Client, ns, parent, prefix string, k int) ([]time.Duration, error) {
	pid, err := spiffeid.FromString(parent)
	if err != nil {
		return nil, err
	}
	return timeCreates(ctx, api, k, func(j int) *types.Entry {
		return &types.Entry{
			SpiffeId:    &types.SPIFFEID{TrustDomain: trustDomain, Path: fmt.Sprintf("/ns/%s/sa/%s-%d", ns, prefix, j)},
			ParentId:    &types.SPIFFEID{TrustDomain: trustDomain, Path: pid.Path()},
			Selectors:   []*types.Selector{{Type: "k8s", Value: "ns:" + ns}, {Type: "k8s", Value: fmt.Sprintf("sa:%s-%d", prefix, j)}},
			X509SvidTtl: 3600,
		}
	})
}

// loadAvg returns the 1-, 5- and 15-minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func buildNames(bs []build) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = b.name
	}
	return strings.Join(names, ", ")
}
