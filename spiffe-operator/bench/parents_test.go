package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// benchCluster is the operator's --cluster-name in the parent-mode runs.
const benchCluster = "bench"

// parentSettings are the settings of BenchmarkParentModes, from the
// environment: BENCH_PARENT_WORKLOADS (default 10000, 1000 with QUICK),
// BENCH_NODES (default 100), BENCH_ROUNDS (default 1).
type parentSettings struct {
	workloads, nodes, rounds int
}

func loadParentSettings() parentSettings {
	s := parentSettings{workloads: 10000, nodes: 100, rounds: 1}
	if quick() {
		s.workloads = 1000
	}
	for env, v := range map[string]*int{"BENCH_PARENT_WORKLOADS": &s.workloads, "BENCH_NODES": &s.nodes, "BENCH_ROUNDS": &s.rounds} {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*v = n
		}
	}
	return s
}

// BenchmarkParentModes converges the same workloads, each with one pod
// bound to one of the nodes, once with one fixed parent and once with
// per-node parents, and prints each mode's entry count and converge time
// beside raw floors: the same entries written straight to SPIRE, in
// batches of 50, one call at a time, on a fresh server. Use -benchtime 1x.
func BenchmarkParentModes(b *testing.B) {
	for range b.N {
		if err := runParentModes(b, loadParentSettings()); err != nil {
			b.Fatal(err)
		}
	}
}

func runParentModes(b *testing.B, s parentSettings) error {
	ctx := context.Background()
	rep := &report{}
	rep.add("# spiffe-operator parent modes, %s: %d workloads (one service account and one pod each) over %d nodes, SPIRE at INFO",
		time.Now().UTC().Format(time.RFC3339), s.workloads, s.nodes)

	cp, k8s, bin, err := startBench(b)
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()

	ns := fmt.Sprintf("parents-%d", s.workloads)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	t0 := time.Now()
	uids, err := createNodes(ctx, k8s, s.nodes)
	if err != nil {
		return err
	}
	if err := createDeployments(ctx, k8s, ns, "w", s.workloads); err != nil {
		return err
	}
	if err := createServiceAccounts(ctx, k8s, ns, "w", s.workloads); err != nil {
		return err
	}
	if err := createPods(ctx, k8s, ns, "w", s.workloads, s.nodes); err != nil {
		return err
	}
	b.Logf("created %d nodes, %d Deployments and %d pods in %s", s.nodes, s.workloads, s.workloads, time.Since(t0).Round(time.Millisecond))

	fixed := func(i int) *types.Entry { return floorEntry(ns, i, "/spire/agent/k8s_psat/bench", true) }
	perNode := func(i int) *types.Entry {
		return floorEntry(ns, i, "/spire/agent/k8s_psat/"+benchCluster+"/"+string(uids[i%s.nodes]), true)
	}
	oneSelector := func(i int) *types.Entry {
		return floorEntry(ns, i, "/spire/agent/k8s_psat/"+benchCluster+"/"+string(uids[i%s.nodes]), false)
	}
	for _, m := range []struct {
		name  string
		spec  func(*v1alpha1.SpiffeRegistrationSpec)
		floor func(int) *types.Entry
	}{
		{"fixed parent", func(sp *v1alpha1.SpiffeRegistrationSpec) { sp.ParentID = parentID }, fixed},
		{"per-node parents", func(*v1alpha1.SpiffeRegistrationSpec) {}, perNode},
	} {
		for r := range s.rounds {
			floor, err := floorOf(ctx, sqliteSpire(), 1, s.workloads, m.floor)
			if err != nil {
				return fmt.Errorf("%s floor: %w", m.name, err)
			}
			scmFloor, err := floorOf(ctx, sqliteSpire(), 1, s.workloads, oneSelector)
			if err != nil {
				return fmt.Errorf("one-selector floor: %w", err)
			}
			name := fmt.Sprintf("%s-%s-r%d", ns, strings.ReplaceAll(m.name, " ", "-"), r)
			d, count, rss, err := convergeMode(ctx, k8s, cp.KubeconfigPath, bin, ns, name, s.workloads, m.spec, sqliteSpire(), "--cluster-name", benchCluster)
			if err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			rep.add("%s, round %d: %d entries in SPIRE; converge %s = %.2fx its own shape's floor (%s), %.2fx the floor of one-selector entries over per-node parents (%s); operator RSS %.1f MiB",
				m.name, r+1, count, d.Round(time.Millisecond), d.Seconds()/floor.Seconds(), floor.Round(time.Millisecond),
				d.Seconds()/scmFloor.Seconds(), scmFloor.Round(time.Millisecond), rss)
		}
	}
	return rep.write(os.Getenv("BENCH_PARENTS_OUT"))
}

// floorEntry is entry i of a raw floor: the operator's shape (k8s:ns and
// k8s:sa selectors) when both is set, else one selector per entry (the
// k8s:pod-uid shape of one entry per pod).
func floorEntry(ns string, i int, parentPath string, both bool) *types.Entry {
	e := &types.Entry{
		SpiffeId:    &types.SPIFFEID{TrustDomain: trustDomain, Path: fmt.Sprintf("/ns/%s/sa/w-%d", ns, i)},
		ParentId:    &types.SPIFFEID{TrustDomain: trustDomain, Path: parentPath},
		Selectors:   []*types.Selector{{Type: "k8s", Value: fmt.Sprintf("sa:w-%d", i)}},
		X509SvidTtl: 3600,
	}
	if both {
		e.Selectors = append(e.Selectors, &types.Selector{Type: "k8s", Value: "ns:" + ns})
	} else {
		e.Selectors[0].Value = fmt.Sprintf("pod-uid:00000000-0000-0000-0000-%012d", i)
	}
	return e
}

// floorOf times n creates of entry(i) in batches of 50, concurrency calls
// at a time, on a fresh server started with opts.
func floorOf(ctx context.Context, opts testenv.SpireOptions, concurrency, n int, entry func(int) *types.Entry) (time.Duration, error) {
	srv, err := testenv.StartSpire(opts)
	if err != nil {
		return 0, err
	}
	defer func() { _ = srv.Cleanup() }()
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return 0, err
	}
	defer func() { _ = closer.Close() }()
	api := spire.NewClient(conn, spire.Options{BatchSize: 50, Concurrency: concurrency})
	in := make([]*types.Entry, n)
	for i := range in {
		in[i] = entry(i)
	}
	start := time.Now()
	res, err := api.Create(ctx, in)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	for _, r := range res {
		if r.Code != codes.OK {
			return 0, fmt.Errorf("floor create: %s %s", r.Code, r.Message)
		}
	}
	return d, nil
}

// convergeMode starts a fresh server (with opts) and operator (with the
// extra args), creates a policy selecting ns (spec changed by mut), and
// times it until its status reports n entries registered. It returns the
// time, the entries SPIRE then holds and the operator's RSS, and removes
// the policy, operator and server.
func convergeMode(ctx context.Context, k8s client.WithWatch, kubeconfig, bin, ns, name string, n int,
	mut func(*v1alpha1.SpiffeRegistrationSpec), opts testenv.SpireOptions, args ...string) (time.Duration, int, float64, error) {
	srv, err := testenv.StartSpire(opts)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = srv.Cleanup() }()
	proc, err := startOperator(bin, kubeconfig, srv.SocketPath, args...)
	if err != nil {
		return 0, 0, 0, err
	}
	defer proc.stop()
	if err := proc.waitReady(ctx); err != nil {
		return 0, 0, 0, err
	}
	policy := &v1alpha1.SpiffeRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SpiffeRegistrationSpec{
			TrustDomain:       trustDomain,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		},
	}
	mut(&policy.Spec)
	start := time.Now()
	if err := k8s.Create(ctx, policy); err != nil {
		return 0, 0, 0, err
	}
	if err := waitRegistered(ctx, k8s, policy, n, 20*time.Minute); err != nil {
		return 0, 0, 0, err
	}
	d := time.Since(start)
	rss, err := proc.rss()
	if err != nil {
		return 0, 0, 0, err
	}
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { _ = closer.Close() }()
	all, err := spire.NewClient(conn, spire.Options{}).ListAll(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	return d, len(all), rss, discard(ctx, k8s, srv, proc, policy)
}

// createNodes creates n Node objects and returns their UIDs.
func createNodes(ctx context.Context, k8s client.Client, n int) ([]k8stypes.UID, error) {
	uids := make([]k8stypes.UID, n)
	for i := range n {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i)}}
		if err := k8s.Create(ctx, node); err != nil {
			return nil, err
		}
		uids[i] = node.UID
	}
	return uids, nil
}

// createServiceAccounts creates the service accounts of createDeployments'
// Deployments: a pod can only be created once its account exists.
func createServiceAccounts(ctx context.Context, k8s client.Client, ns, prefix string, n int) error {
	return parallel(n, func(i int) error {
		return k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)}})
	})
}

// parallel calls fn(0..n-1) from 16 goroutines and returns one of the errors.
func parallel(n int, fn func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := fn(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// createPods creates one pod per Deployment of createDeployments, pod i
// bound to node i mod nodes, as the scheduler would bind it.
func createPods(ctx context.Context, k8s client.Client, ns, prefix string, n, nodes int) error {
	return parallel(n, func(i int) error {
		return k8s.Create(ctx, scalePod(ns, fmt.Sprintf("%s-%d", prefix, i), i%nodes))
	})
}
