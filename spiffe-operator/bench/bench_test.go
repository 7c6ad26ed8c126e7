package bench

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/residency"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

const (
	trustDomain = "example.org"
	parentID    = "spiffe://example.org/spire/agent/k8s_psat/bench"
	// Kubernetes client limits of the operator in this run (its defaults).
	kubeQPS   = "50"
	kubeBurst = "100"
)

// sqliteSpire is a server of the benchmark's trust domain on its own sqlite
// file, at INFO (DEBUG logging slows SPIRE several times).
func sqliteSpire() testenv.SpireOptions {
	return testenv.SpireOptions{TrustDomain: trustDomain, LogLevel: "INFO"}
}

// settings of a run, from the environment.
type settings struct {
	sizes   []int
	idle    time.Duration
	samples int
	// rounds of the converge measure; 0 means 5 below 5,000 Deployments, 3 from there.
	rounds int
	// floor is false when BENCH_FLOOR=0.
	floor bool
	// pods is true when BENCH_PODS=1: every Deployment also gets its
	// service account and one running pod, so the operator caches them.
	pods bool
}

// repeat returns the number of converge rounds at n Deployments.
func (s settings) repeat(n int) int {
	switch {
	case s.rounds > 0:
		return s.rounds
	case n < 5000:
		return 5
	}
	return 3
}

func loadSettings() settings {
	s := settings{sizes: []int{1000, 10000}, idle: 10 * time.Minute, samples: 100, floor: os.Getenv("BENCH_FLOOR") != "0", pods: os.Getenv("BENCH_PODS") == "1"}
	if quick() {
		s.sizes, s.idle, s.rounds = []int{1000}, time.Minute, 3
	}
	if n, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil && n > 0 {
		s.rounds = n
	}
	if v := os.Getenv("BENCH_SIZES"); v != "" {
		s.sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err == nil && n > 0 {
				s.sizes = append(s.sizes, n)
			}
		}
	}
	if d, err := time.ParseDuration(os.Getenv("BENCH_IDLE")); err == nil {
		s.idle = d
	}
	if n, err := strconv.Atoi(os.Getenv("BENCH_SAMPLES")); err == nil && n > 0 {
		s.samples = n
	}
	return s
}

// quick reports whether QUICK is set (as by `make bench QUICK=1`): every
// benchmark then runs its 1,000-workload subset only, in a few minutes.
func quick() bool { return os.Getenv("QUICK") != "" }

// report collects the figures and prints them at the end.
type report struct {
	mu    sync.Mutex
	lines []string
	// p99s are the one-new-Deployment p99s by size, in the order measured.
	p99s []sizeP99
}

type sizeP99 struct {
	n   int
	p99 time.Duration
	// blocks are the p99s of consecutive blocks of sampleBlock samples,
	// in the order they ran (none below two blocks' worth).
	blocks []time.Duration
}

// newP99s prints the one-new-Deployment p99 of every size side by side,
// each with its ratio to the first size's (the target: flat).
func (r *report) newP99s() {
	if len(r.p99s) < 2 {
		return
	}
	parts := make([]string, len(r.p99s))
	for i, p := range r.p99s {
		parts[i] = fmt.Sprintf("N=%d %s (%.2fx)", p.n, p.p99, p.p99.Seconds()/r.p99s[0].p99.Seconds())
	}
	r.add("one new Deployment to its entry, p99 by size (ratio to N=%d; target flat): %s", r.p99s[0].n, strings.Join(parts, ", "))
	base := r.p99s[0].blocks
	if len(base) == 0 {
		return
	}
	lo, hi := slices.Min(base), slices.Max(base)
	for i, p := range r.p99s {
		if len(p.blocks) == 0 {
			continue
		}
		within := "within"
		if p.p99 < lo || p.p99 > hi {
			within = "outside"
		}
		parts[i] = fmt.Sprintf("N=%d [%s] (p99 %s, %s the N=%d blocks' %s..%s)", p.n, durations(p.blocks), p.p99, within, r.p99s[0].n,
			lo.Round(time.Millisecond), hi.Round(time.Millisecond))
	}
	r.add("the same p99 per block of %d samples, in the order they ran: %s", sampleBlock, strings.Join(parts, "; "))
}

// sampleBlock is how many samples in a row make one block of blockP99s.
const sampleBlock = 200

// blockP99s returns the p99 of each run of size consecutive samples of
// windows (in the order they ran), or nil when there are fewer than two
// such runs; a partial last run is left out.
func blockP99s(windows []sampleWindow, size int) []time.Duration {
	if len(windows) < 2*size {
		return nil
	}
	var out []time.Duration
	for start := 0; start+size <= len(windows); start += size {
		took := make([]time.Duration, size)
		for i, w := range windows[start : start+size] {
			took[i] = w.took
		}
		slices.Sort(took)
		out = append(out, pct(took, 99))
	}
	return out
}

func (r *report) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	r.lines = append(r.lines, line)
	fmt.Println(line)
}

func (r *report) write(path string) error {
	if path == "" {
		return nil
	}
	return os.WriteFile(path, []byte(strings.Join(r.lines, "\n")+"\n"), 0o644)
}

// BenchmarkSpiffeOperator runs the whole measurement once (use -benchtime 1x).
func BenchmarkSpiffeOperator(b *testing.B) {
	for range b.N {
		if err := run(b, loadSettings()); err != nil {
			b.Fatal(err)
		}
	}
}

// postgresBench is what a benchmark against SPIRE on PostgreSQL starts:
// the PostgreSQL server its databases live on, and startBench's control
// plane, client and operator binary.
type postgresBench struct {
	pg  *testenv.Postgres
	cp  *testenv.ControlPlane
	k8s client.WithWatch
	bin string
}

// startPostgresBench starts PostgreSQL, then startBench's parts; stop
// stops them in the reverse order.
func startPostgresBench(b *testing.B) (*postgresBench, error) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		return nil, err
	}
	cp, k8s, bin, err := startBench(b)
	if err != nil {
		_ = pg.Cleanup()
		return nil, err
	}
	return &postgresBench{pg: pg, cp: cp, k8s: k8s, bin: bin}, nil
}

func (e *postgresBench) stop() {
	_ = e.cp.Stop()
	_ = e.pg.Cleanup()
}

// startBench starts the control plane both benchmarks run against (the
// operator's CRDs, raised in-flight limits), an admin client with a high
// rate limit, and builds the operator binary. The caller stops cp.
func startBench(b *testing.B) (*testenv.ControlPlane, client.WithWatch, string, error) {
	scheme, err := operator.Scheme()
	if err != nil {
		return nil, nil, "", err
	}
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{
		CRDDirectoryPaths: []string{filepath.Join("..", "config", "crd", "bases")},
		Scheme:            scheme,
		APIServerFlags:    map[string]string{"max-requests-inflight": "800", "max-mutating-requests-inflight": "400"},
	})
	if err != nil {
		return nil, nil, "", err
	}
	cp.Config.QPS, cp.Config.Burst = 2000, 4000
	k8s, err := client.NewWithWatch(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		_ = cp.Stop()
		return nil, nil, "", fmt.Errorf("client: %w", err)
	}
	bin := os.Getenv("BENCH_OPERATOR_BIN")
	if bin != "" {
		return cp, k8s, bin, nil
	}
	bin = filepath.Join(b.TempDir(), "spiffe-operator")
	if err := buildOperator(bin); err != nil {
		_ = cp.Stop()
		return nil, nil, "", err
	}
	return cp, k8s, bin, nil
}

func run(b *testing.B, s settings) error {
	ctx := context.Background()
	rep := &report{}
	rep.add("# spiffe-operator benchmark, %s", time.Now().UTC().Format(time.RFC3339))
	rep.add("# operator: own process, kube-api-qps=%s kube-api-burst=%s, spire-write-concurrency=%s, batch 50, requeue-after 30m, gc-percent %s", kubeQPS, kubeBurst, writeConcurrency(), gcPercent())

	cp, k8s, bin, err := startBench(b)
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()

	for i, n := range s.sizes {
		last := i == len(s.sizes)-1
		if err := runSize(ctx, b, rep, k8s, cp.KubeconfigPath, bin, n, s, last); err != nil {
			return fmt.Errorf("N=%d: %w", n, err)
		}
	}
	rep.newP99s()
	return rep.write(os.Getenv("BENCH_OUT"))
}

func runSize(ctx context.Context, b *testing.B, rep *report, k8s client.WithWatch, kubeconfig, bin string, n int, s settings, idle bool) error {
	ns := fmt.Sprintf("bench-%d", n)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"bench": "on"}}}); err != nil {
		return err
	}
	createStart := time.Now()
	if err := createDeployments(ctx, k8s, ns, "w", n); err != nil {
		return err
	}
	if s.pods {
		if err := createServiceAccounts(ctx, k8s, ns, "w", n); err != nil {
			return err
		}
		if err := createPods(ctx, k8s, ns, "w", n, 1); err != nil {
			return err
		}
		defer func() { _ = k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns)) }()
	}
	b.Logf("created %d Deployments (pods: %v) in %s", n, s.pods, time.Since(createStart).Round(time.Millisecond))
	defer func() {
		_ = k8s.DeleteAllOf(ctx, &appsv1.Deployment{}, client.InNamespace(ns))
		_ = k8s.DeleteAllOf(ctx, &v1alpha1.SpiffeRegistration{})
	}()

	// Converge from nothing, repeated: each round times two raw floors on
	// fresh servers (the operator's own entry shape under its parent, and
	// one-selector entries over 100 per-node parents, the shape of
	// spire-controller-manager's entries), then the operator (a fresh
	// process) on another fresh server. The ratios reported are the
	// medians of the rounds' ratios; the last round's operator and server
	// stay for the measures below.
	rounds := s.repeat(n)
	var (
		ratios, scmRatios []float64
		converges         []time.Duration
		floors, scmFloors []time.Duration
		srv               *testenv.Spire
		proc              *process
		policy            *v1alpha1.SpiffeRegistration
	)
	scmShape := func(i int) *types.Entry {
		return floorEntry("floor", i, fmt.Sprintf("/spire/agent/k8s_psat/bench/node-%d", i%100), false)
	}
	for r := range rounds {
		var floor, scmFloor time.Duration
		if s.floor {
			var err error
			if floor, err = measureFloor(ctx, n); err != nil {
				return fmt.Errorf("floor: %w", err)
			}
			if scmFloor, err = floorOf(ctx, sqliteSpire(), 1, n, scmShape); err != nil {
				return fmt.Errorf("one-selector floor: %w", err)
			}
		}
		var (
			converge time.Duration
			err      error
		)
		srv, proc, policy, converge, err = converge1(ctx, k8s, kubeconfig, bin, ns, fmt.Sprintf("%s-r%d", ns, r), n)
		if err != nil {
			return err
		}
		converges = append(converges, converge)
		if floor > 0 {
			floors, scmFloors = append(floors, floor), append(scmFloors, scmFloor)
			ratios = append(ratios, converge.Seconds()/floor.Seconds())
			scmRatios = append(scmRatios, converge.Seconds()/scmFloor.Seconds())
		}
		b.Logf("N=%d round %d: converge %s, floor %s, one-selector floor %s (load %s)", n, r+1, converge.Round(time.Millisecond),
			floor.Round(time.Millisecond), scmFloor.Round(time.Millisecond), loadAvg())
		if r < rounds-1 {
			if err := discard(ctx, k8s, srv, proc, policy); err != nil {
				return err
			}
		}
	}
	defer func() { _ = srv.Cleanup() }()
	defer proc.stop()
	if len(ratios) > 0 {
		rep.add("N=%d converge: median %s = %.2fx its own shape's floor (median %s; target <= 1.10x), %.2fx the one-selector per-node floor (median %s) over %d rounds; rounds: own shape %s; one-selector %s",
			n, medianDuration(converges).Round(time.Millisecond), median(ratios), medianDuration(floors).Round(time.Millisecond),
			median(scmRatios), medianDuration(scmFloors).Round(time.Millisecond), rounds,
			rounds2str(converges, floors, ratios), rounds2str(converges, scmFloors, scmRatios))
	} else {
		rep.add("N=%d converge: %s (floor not measured)", n, durations(converges))
	}
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return err
	}
	defer func() { _ = closer.Close() }()
	api := spire.NewClient(conn, spire.Options{})

	// One new Deployment at a time: from the Create call to its entry in SPIRE.
	entryClient := entryv1.NewEntryClient(conn)
	prefix, err := proc.entryIDPrefix()
	if err != nil {
		return err
	}
	ids := entries.IDScheme{Prefix: prefix}
	tag := entries.OwnerTag(policy.UID)
	stopCPU := proc.cpuProfile(b, fmt.Sprintf("new-%d", n))
	var lat []time.Duration
	for j := range s.samples {
		name := fmt.Sprintf("new-%d", j)
		e := benchEntry(ns, name)
		id := ids.EntryID(tag, e.Key())
		t0 := time.Now()
		if err := k8s.Create(ctx, deployment(ns, name, name)); err != nil {
			return err
		}
		if err := waitEntry(ctx, entryClient, id, 30*time.Second); err != nil {
			return fmt.Errorf("entry of %s: %w", name, err)
		}
		lat = append(lat, time.Since(t0))
	}
	stopCPU()
	slices.Sort(lat)
	rep.p99s = append(rep.p99s, sizeP99{n: n, p99: pct(lat, 99)})
	rep.add("N=%d one new Deployment to its entry (%d samples): p50 %s, p99 %s, max %s (target p99 < 100ms)",
		n, len(lat), pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(100*time.Microsecond))

	// One workload changed, at a time: an existing Deployment moves to
	// another service account, so its entry is replaced (an incremental
	// pass). From the Update call to the new entry being readable, and to
	// the old one being gone (no Pods run here, so none retains it).
	// With pods, the old entry stays while its pod runs: not measured then.
	if !s.pods {
		stopCPU = proc.cpuProfile(b, fmt.Sprintf("changed-%d", n))
		created, replaced, err := measureReplace(ctx, k8s, entryClient, ids, tag, ns, n, s.samples, "-moved")
		stopCPU()
		if err != nil {
			return err
		}
		rep.add("N=%d one Deployment changed to its entry replaced (%d samples): new entry p50 %s, p99 %s, max %s; old entry gone p50 %s, p99 %s, max %s",
			n, len(created), pct(created, 50), pct(created, 99), created[len(created)-1].Round(100*time.Microsecond),
			pct(replaced, 50), pct(replaced, 99), replaced[len(replaced)-1].Round(100*time.Microsecond))
	}

	// For context: SPIRE's own latency for one BatchCreateEntry of one entry
	// at this size, under a parent the operator does not use.
	raw, err := rawCreates(ctx, api, n, 20)
	if err != nil {
		return err
	}
	rep.add("N=%d SPIRE alone, one BatchCreateEntry of 1 entry (%d samples): p50 %s, p99 %s (part of the figure above)",
		n, len(raw), pct(raw, 50), pct(raw, 99))

	rss, err := proc.rss()
	if err != nil {
		return err
	}
	if a := os.Getenv("BENCH_PPROF"); a != "" {
		proc.heapProfile(b, strconv.Itoa(n))
		// The text form ends with the runtime's MemStats: heap in use and
		// idle, stacks, span and GC metadata.
		if out, err := exec.Command("curl", "-s", "-o", fmt.Sprintf("/tmp/spiffe-operator-heap-%d.txt", n), "http://"+a+"/debug/pprof/heap?debug=1").CombinedOutput(); err != nil {
			b.Logf("heap profile (text): %v: %s", err, out)
		}
		if smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", proc.cmd.Process.Pid)); err == nil {
			_ = os.WriteFile(fmt.Sprintf("/tmp/spiffe-operator-smaps-%d.txt", n), smaps, 0o644)
		}
	}
	anon, file := proc.rssDetail()
	rep.add("N=%d operator RSS %.1f MiB after convergence (anon %.1f, file %.1f; pods cached: %v; target <= 60 MiB at 10,000 with pods)", n, rss, anon, file, s.pods)
	if exe, err := residency.Of(proc.cmd.Process.Pid); err == nil {
		rep.add("N=%d operator file-backed RSS: %s", n, exe.Summary(8))
	} else {
		b.Logf("where the executable's resident pages go: %v", err)
	}

	if idle && s.idle > 0 {
		m0, err := proc.settle(30 * time.Second)
		if err != nil {
			return err
		}
		cpu0, err := proc.cpuSeconds()
		if err != nil {
			return err
		}
		b.Logf("idle window of %s", s.idle)
		timer := time.NewTimer(s.idle)
		<-timer.C
		m1, err := proc.metrics()
		if err != nil {
			return err
		}
		cpu1, err := proc.cpuSeconds()
		if err != nil {
			return err
		}
		rss1, err := proc.rss()
		if err != nil {
			return err
		}
		rep.add("N=%d idle %s: %d SPIRE calls, %d API writes, %.2f CPU-seconds per minute, RSS %.1f MiB (targets: 0 calls, 0 writes)",
			n, s.idle, int(m1.spireCalls-m0.spireCalls), int(m1.apiWrites-m0.apiWrites),
			(cpu1-cpu0)/s.idle.Minutes(), rss1)
	}
	return nil
}

// converge1 starts a fresh SPIRE server and operator process, creates a
// policy selecting namespace ns and times it from the policy's creation to
// its status reporting all n entries registered, which SPIRE must hold.
func converge1(ctx context.Context, k8s client.WithWatch, kubeconfig, bin, ns, name string, n int) (*testenv.Spire, *process, *v1alpha1.SpiffeRegistration, time.Duration, error) {
	srv, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: trustDomain, LogLevel: "INFO"})
	if err != nil {
		return nil, nil, nil, 0, err
	}
	proc, err := startOperator(bin, kubeconfig, srv.SocketPath)
	if err != nil {
		_ = srv.Cleanup()
		return nil, nil, nil, 0, err
	}
	fail := func(err error) (*testenv.Spire, *process, *v1alpha1.SpiffeRegistration, time.Duration, error) {
		proc.stop()
		_ = srv.Cleanup()
		return nil, nil, nil, 0, err
	}
	if err := proc.waitReady(ctx); err != nil {
		return fail(err)
	}
	policy := &v1alpha1.SpiffeRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SpiffeRegistrationSpec{
			TrustDomain:       trustDomain,
			ParentID:          parentID,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
		},
	}
	cpu0, _ := proc.cpuSeconds()
	start := time.Now()
	if err := k8s.Create(ctx, policy); err != nil {
		return fail(err)
	}
	if os.Getenv("BENCH_DEBUG_LOG") == "1" {
		fmt.Printf("# policy %s created at %s, operator log %s\n", name, start.UTC().Format(time.RFC3339Nano), proc.log)
	}
	if err := waitRegistered(ctx, k8s, policy, n, 10*time.Minute); err != nil {
		return fail(err)
	}
	d := time.Since(start)
	if os.Getenv("BENCH_DEBUG_LOG") == "1" {
		cpu1, _ := proc.cpuSeconds()
		fmt.Printf("# converge %s, operator CPU %.2fs\n", d, cpu1-cpu0)
	}
	list, err := countEntries(ctx, srv)
	if err != nil {
		return fail(err)
	}
	if list != n {
		return fail(fmt.Errorf("SPIRE holds %d entries, want %d", list, n))
	}
	return srv, proc, policy, d, nil
}

// countEntries counts the entries under parentID.
func countEntries(ctx context.Context, srv *testenv.Spire) (int, error) {
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return 0, err
	}
	defer func() { _ = closer.Close() }()
	list, err := spire.NewClient(conn, spire.Options{}).ListByParent(ctx, spiffeid.RequireFromString(parentID))
	return len(list), err
}

// discard ends a round: stops the operator and the server, and removes the
// policy (its finalizer too, since no operator is left to remove it).
func discard(ctx context.Context, k8s client.Client, srv *testenv.Spire, proc *process, policy *v1alpha1.SpiffeRegistration) error {
	proc.stop()
	if err := srv.Cleanup(); err != nil {
		return err
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		return err
	}
	patch := client.MergeFrom(policy.DeepCopy())
	policy.Finalizers = nil
	if err := k8s.Patch(ctx, policy, patch); err != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return client.IgnoreNotFound(k8s.Delete(ctx, policy))
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDuration(ds []time.Duration) time.Duration {
	v := make([]float64, len(ds))
	for i, d := range ds {
		v[i] = float64(d)
	}
	return time.Duration(median(v))
}

func durations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(time.Millisecond).String()
	}
	return strings.Join(parts, ", ")
}

// rounds2str lists each round as converge/floor=ratio.
func rounds2str(converges, floors []time.Duration, ratios []float64) string {
	parts := make([]string, len(ratios))
	for i := range ratios {
		parts[i] = fmt.Sprintf("%s/%s=%.2fx", converges[i].Round(time.Millisecond), floors[i].Round(time.Millisecond), ratios[i])
	}
	return strings.Join(parts, ", ")
}

// benchEntry is the entry the benchmark's policy renders for service
// account sa in namespace ns.
func benchEntry(ns, sa string) entries.Entry {
	e := entries.Entry{
		SpiffeID:  spiffeid.RequireFromString(fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, ns, sa)),
		ParentID:  spiffeid.RequireFromString(parentID),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:" + ns}, {Type: "k8s", Value: "sa:" + sa}},
	}
	e.Normalize()
	return e
}

// measureReplace moves k of the n converged Deployments (w-0, w-1, ...,
// spread over the range) to a new service account (the name with suffix
// appended), one at a time, and times
// from each Update call to the new entry being readable (created) and to the
// old entry being gone (replaced), both sorted.
func measureReplace(ctx context.Context, k8s client.Client, c entryv1.EntryClient, ids entries.IDScheme, tag, ns string, n, k int, suffix string) (created, replaced []time.Duration, err error) {
	if k > n {
		k = n
	}
	for j := range k {
		name := fmt.Sprintf("w-%d", j*(n/k))
		d := &appsv1.Deployment{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
			return nil, nil, err
		}
		oldE, newE := benchEntry(ns, d.Spec.Template.Spec.ServiceAccountName), benchEntry(ns, name+suffix)
		oldID, newID := ids.EntryID(tag, oldE.Key()), ids.EntryID(tag, newE.Key())
		if _, err := c.GetEntry(ctx, &entryv1.GetEntryRequest{Id: oldID}); err != nil {
			return nil, nil, fmt.Errorf("entry of %s before the change: %w", name, err)
		}
		d.Spec.Template.Spec.ServiceAccountName = name + suffix
		t0 := time.Now()
		if err := k8s.Update(ctx, d); err != nil {
			return nil, nil, err
		}
		if err := waitEntry(ctx, c, newID, 30*time.Second); err != nil {
			return nil, nil, fmt.Errorf("new entry of %s: %w", name, err)
		}
		created = append(created, time.Since(t0))
		if err := waitGone(ctx, c, oldID, 30*time.Second); err != nil {
			return nil, nil, fmt.Errorf("old entry of %s: %w", name, err)
		}
		replaced = append(replaced, time.Since(t0))
	}
	slices.Sort(created)
	slices.Sort(replaced)
	return created, replaced, nil
}

// rawCreates times k single-entry creates straight against SPIRE.
func rawCreates(ctx context.Context, api *spire.Client, n, k int) ([]time.Duration, error) {
	return timeCreates(ctx, api, k, func(j int) *types.Entry {
		return &types.Entry{
			SpiffeId:  &types.SPIFFEID{TrustDomain: trustDomain, Path: fmt.Sprintf("/raw/%d/%d", n, j)},
			ParentId:  &types.SPIFFEID{TrustDomain: trustDomain, Path: "/spire/agent/k8s_psat/raw"},
			Selectors: []*types.Selector{{Type: "k8s", Value: fmt.Sprintf("sa:raw-%d", j)}},
		}
	})
}

// timeCreates times k creates of one entry each, entry(j) for j in [0, k),
// straight against SPIRE, and returns the times sorted.
func timeCreates(ctx context.Context, api *spire.Client, k int, entry func(j int) *types.Entry) ([]time.Duration, error) {
	out := make([]time.Duration, 0, k)
	for j := range k {
		t0 := time.Now()
		res, err := api.Create(ctx, []*types.Entry{entry(j)})
		if err != nil {
			return nil, err
		}
		if res[0].Code != codes.OK {
			return nil, fmt.Errorf("raw create: %s %s", res[0].Code, res[0].Message)
		}
		out = append(out, time.Since(t0))
	}
	slices.Sort(out)
	return out, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i].Round(100 * time.Microsecond)
}

// measureFloor times n creates of the operator's entries for namespace
// floor, in batches of 50, one call at a time, on a fresh server.
func measureFloor(ctx context.Context, n int) (time.Duration, error) {
	return floorOf(ctx, sqliteSpire(), 1, n, func(i int) *types.Entry { return floorEntry("floor", i, "/spire/agent/k8s_psat/bench", true) })
}

func deployment(ns, name, sa string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: sa,
					Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			},
		},
	}
}

// createDeployments creates n Deployments, one service account each.
func createDeployments(ctx context.Context, k8s client.Client, ns, prefix string, n int) error {
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("%s-%d", prefix, i)
				if err := k8s.Create(ctx, deployment(ns, name, name)); err != nil {
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

// waitRegistered watches policy p until its status reports n entries
// registered. A watch, unlike polling, adds no load on the API server while
// the operator works, and sees the status write as soon as it lands.
func waitRegistered(ctx context.Context, k8s client.WithWatch, p *v1alpha1.SpiffeRegistration, n int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w, err := k8s.Watch(ctx, &v1alpha1.SpiffeRegistrationList{}, client.MatchingFields{"metadata.name": p.Name})
		if err != nil {
			return fmt.Errorf("watch policy %s: %w", p.Name, err)
		}
		for ev := range w.ResultChan() {
			if got, ok := ev.Object.(*v1alpha1.SpiffeRegistration); ok {
				got.DeepCopyInto(p)
				if int(p.Status.EntriesRegistered) == n {
					w.Stop()
					return nil
				}
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return fmt.Errorf("policy %s: %d of %d entries registered after %s", p.Name, p.Status.EntriesRegistered, n, timeout)
		}
	}
}

func waitEntry(ctx context.Context, c entryv1.EntryClient, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		_, err := c.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
		if err == nil {
			return nil
		}
		if status.Code(err) != codes.NotFound {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("entry %s not there after %s", id, timeout)
		}
	}
	return nil
}

// waitGone polls entry id every 2 ms until SPIRE answers NotFound.
func waitGone(ctx context.Context, c entryv1.EntryClient, id string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		_, err := c.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("entry %s still there after %s", id, timeout)
		}
	}
	return nil
}

// gcPercent is BENCH_GC_PERCENT or the operator's default.
func gcPercent() string {
	if v := os.Getenv("BENCH_GC_PERCENT"); v != "" {
		return v
	}
	return "10"
}

// statusMaxWait is BENCH_STATUS_MAX_WAIT or the operator's default.
func statusMaxWait() string {
	if v := os.Getenv("BENCH_STATUS_MAX_WAIT"); v != "" {
		return v
	}
	return "1s"
}

// pprofAddr is BENCH_PPROF (e.g. 127.0.0.1:6060) or disabled.
func pprofAddr() string {
	if v := os.Getenv("BENCH_PPROF"); v != "" {
		return v
	}
	return "0"
}

func writeConcurrency() string {
	if v := os.Getenv("BENCH_WRITE_CONCURRENCY"); v != "" {
		return v
	}
	return "1"
}

// heapProfile saves a heap profile of the operator as
// /tmp/spiffe-operator-heap-<name>.pb.gz when BENCH_PPROF is set. Its
// alloc_space counts every allocation since the start, so two of them,
// one before and one after a stretch (go tool pprof -base), give what that
// stretch allocated.
func (p *process) heapProfile(b *testing.B, name string) {
	addr := os.Getenv("BENCH_PPROF")
	if addr == "" {
		return
	}
	out := fmt.Sprintf("/tmp/spiffe-operator-heap-%s.pb.gz", name)
	if msg, err := exec.Command("curl", "-s", "-o", out, "http://"+addr+"/debug/pprof/heap").CombinedOutput(); err != nil {
		b.Logf("heap profile %s: %v: %s", name, err, msg)
	}
}

// cpuProfile starts a CPU profile of the operator when BENCH_PPROF is set
// (saved as /tmp/spiffe-operator-cpu-<name>.pb.gz) and returns the function
// that ends it; without BENCH_PPROF both do nothing.
func (p *process) cpuProfile(b *testing.B, name string) (stop func()) {
	addr := os.Getenv("BENCH_PPROF")
	if addr == "" {
		return func() {}
	}
	// The profile endpoint profiles for a fixed time: BENCH_CPU_SECONDS
	// (default 20), which stop waits out.
	secs := os.Getenv("BENCH_CPU_SECONDS")
	if secs == "" {
		secs = "20"
	}
	out := fmt.Sprintf("/tmp/spiffe-operator-cpu-%s.pb.gz", name)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Get("http://" + addr + "/debug/pprof/profile?seconds=" + secs)
		if err != nil {
			b.Logf("cpu profile %s: %v", name, err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(out)
		if err != nil {
			b.Logf("cpu profile %s: %v", name, err)
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err != nil {
			b.Logf("cpu profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

// process is the operator running as its own process.
type process struct {
	cmd        *exec.Cmd
	metricsURL string
	log        string
	// started is when the process was started, the origin of the times
	// of its GC trace.
	started time.Time
}

// buildOperator builds the operator's binary at bin as its image does
// (static, without cgo, -trimpath), so RSS counts what ships.
func buildOperator(bin string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build operator: %w: %s", err, out)
	}
	return nil
}

// startOperator starts the operator with the benchmark's flags and extra.
func startOperator(bin, kubeconfig, socket string, extra ...string) (*process, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp("", "spiffe-operator-bench-*.log")
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--spire-socket", socket,
		"--trust-domain", trustDomain,
		"--default-environment", "bench",
		"--metrics-bind-address", addr, "--metrics-secure=false", // read over loopback by the benchmark
		"--health-probe-bind-address", "0",
		"--kube-api-qps", kubeQPS, "--kube-api-burst", kubeBurst,
		"--spire-write-concurrency", writeConcurrency(),
		"--zap-time-encoding", "rfc3339nano",
		"--pprof-bind-address", pprofAddr(),
		"--gc-percent", gcPercent(),
		"--status-max-wait", statusMaxWait(),
	)
	cmd.Args = append(cmd.Args, extra...)
	if os.Getenv("BENCH_DEBUG_LOG") == "1" {
		cmd.Args = append(cmd.Args, "--zap-log-level", "debug")
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), gcTraceEnv)
	// The operator dies with the benchmark, also when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start operator: %w", err)
	}
	return &process{cmd: cmd, metricsURL: "http://" + addr + "/metrics", log: logf.Name(), started: time.Now()}, nil
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

// waitReady waits until the SpiffeRegistration controller runs its workers
// (caches synced), as its log says.
func (p *process) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if log, err := os.ReadFile(p.log); err == nil &&
			strings.Contains(string(log), `"msg":"Starting workers","controller":"spifferegistration"`) {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log)
			return fmt.Errorf("operator not up after 60s: %s", lastLines(string(log), 30))
		}
	}
	return ctx.Err()
}

// entryIDPrefix returns the prefix the operator logged at startup (derived
// from the cluster by default).
func (p *process) entryIDPrefix() (string, error) {
	log, err := os.ReadFile(p.log)
	if err != nil {
		return "", err
	}
	const key = `"entryIDPrefix":"`
	i := strings.Index(string(log), key)
	if i < 0 {
		return "", errors.New("the operator did not log its entry ID prefix")
	}
	rest := string(log[i+len(key):])
	return rest[:strings.IndexByte(rest, '"')], nil
}

type counters struct {
	spireCalls float64
	apiWrites  float64
}

func (p *process) metrics() (counters, error) { return p.metricsNow() }

func (p *process) metricsNow() (counters, error) {
	var c counters
	err := p.scrape(func(line string, v float64) {
		switch {
		case strings.HasPrefix(line, "trustplane_spire_rpcs_total{"):
			c.spireCalls += v
		case strings.HasPrefix(line, "rest_client_requests_total{"):
			for _, m := range []string{`method="POST"`, `method="PUT"`, `method="PATCH"`, `method="DELETE"`} {
				if strings.Contains(line, m) {
					c.apiWrites += v
				}
			}
		}
	})
	return c, err
}

// scrape reads the operator's metrics and calls fn with each sample line
// and its value. It asks for them uncompressed: compressing them would cost
// the operator more CPU than gathering them.
func (p *process) scrape(fn func(line string, v float64)) error {
	req, err := http.NewRequest(http.MethodGet, p.metricsURL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			fn(line, v)
		}
	}
	return sc.Err()
}

// costs are cumulative figures of the operator that tell where the time
// of a stretch of work went: SPIRE's creates, the policies' reconciles,
// their requests' wait in the work queue, and garbage collections.
type costs struct {
	createSeconds, creates       float64
	reconcileSeconds, reconciles float64
	// quickReconciles are the passes that took at most 250 ms.
	quickReconciles        float64
	queueSeconds, dequeued float64
	gcs, gcPauseSeconds    float64
	// incremental counts the policies' incremental passes (eventsTaken
	// those that found nothing recorded), full their full passes by reason.
	incremental, eventsTaken float64
	full                     map[string]float64
}

// sub returns the figures of the stretch from c0 to c.
func (c costs) sub(c0 costs) costs {
	return costs{c.createSeconds - c0.createSeconds, c.creates - c0.creates,
		c.reconcileSeconds - c0.reconcileSeconds, c.reconciles - c0.reconciles, c.quickReconciles - c0.quickReconciles,
		c.queueSeconds - c0.queueSeconds, c.dequeued - c0.dequeued,
		c.gcs - c0.gcs, c.gcPauseSeconds - c0.gcPauseSeconds,
		c.incremental - c0.incremental, c.eventsTaken - c0.eventsTaken, subCounts(c.full, c0.full)}
}

// subCounts returns the counts of c less those of c0, leaving out the
// ones that did not grow.
func subCounts(c, c0 map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c {
		if d := v - c0[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// passes prints the passes by kind, and the full ones by reason.
func (c costs) passes() string {
	reasons := slices.Sorted(maps.Keys(c.full))
	var full float64
	by := make([]string, len(reasons))
	for i, r := range reasons {
		full += c.full[r]
		by[i] = fmt.Sprintf("%s %.0f", r, c.full[r])
	}
	return fmt.Sprintf("%.0f incremental passes (%.0f of events an earlier pass took), %.0f full (%s)",
		c.incremental, c.eventsTaken, full, strings.Join(by, ", "))
}

// seconds prints a sum of seconds as a duration.
func seconds(sum float64) time.Duration {
	return time.Duration(sum * float64(time.Second)).Round(10 * time.Microsecond)
}

// String prints the means of the stretch.
func (c costs) String() string {
	mean := func(sum, n float64) string {
		if n == 0 {
			return "none"
		}
		return seconds(sum / n).String()
	}
	return fmt.Sprintf("BatchCreateEntry mean %s over %.0f calls, SpiffeRegistration reconcile mean %s over %.0f (%.0f over 250 ms; %s), queue wait mean %s over %.0f, %.0f garbage collections",
		mean(c.createSeconds, c.creates), c.creates, mean(c.reconcileSeconds, c.reconciles), c.reconciles, c.reconciles-c.quickReconciles,
		c.passes(), mean(c.queueSeconds, c.dequeued), c.dequeued, c.gcs)
}

// within splits a stretch of the given length by where its time went: the
// policies' requests waiting in the work queue, their passes (SPIRE's
// creates among them), the garbage collector's stop-the-world pauses, and
// the rest (the API server, the watch delivering the event, the read-back
// of the entry). The figures are sums over every request that finished in
// the stretch, so the rest is negative when requests overlapped (one waits
// while another's pass runs) or a pass ran on after the entry was written.
func (c costs) within(length time.Duration) string {
	rest := length - seconds(c.queueSeconds) - seconds(c.reconcileSeconds)
	return fmt.Sprintf("%s: queue wait %s (%.0f requests), passes %s (%.0f; BatchCreateEntry %s in %.0f calls), %.0f GCs pausing %s, rest %s",
		length.Round(100*time.Microsecond), seconds(c.queueSeconds), c.dequeued, seconds(c.reconcileSeconds), c.reconciles,
		seconds(c.createSeconds), c.creates, c.gcs, seconds(c.gcPauseSeconds), rest.Round(100*time.Microsecond))
}

// costsNow reads the operator's costs from its metrics.
func (p *process) costsNow() (costs, error) {
	c := costs{full: map[string]float64{}}
	err := p.scrape(func(line string, v float64) {
		create := strings.Contains(line, `method="BatchCreateEntry"`)
		policy := strings.Contains(line, `controller="spifferegistration"`)
		switch {
		case create && strings.HasPrefix(line, "trustplane_spire_rpc_duration_seconds_sum{"):
			c.createSeconds += v
		case create && strings.HasPrefix(line, "trustplane_spire_rpc_duration_seconds_count{"):
			c.creates += v
		case policy && strings.HasPrefix(line, "controller_runtime_reconcile_time_seconds_sum{"):
			c.reconcileSeconds += v
		case policy && strings.HasPrefix(line, "controller_runtime_reconcile_time_seconds_count{"):
			c.reconciles += v
		case policy && strings.HasPrefix(line, "controller_runtime_reconcile_time_seconds_bucket{") && strings.Contains(line, `le="0.25"`):
			c.quickReconciles += v
		case policy && strings.HasPrefix(line, "workqueue_queue_duration_seconds_sum{"):
			c.queueSeconds += v
		case policy && strings.HasPrefix(line, "workqueue_queue_duration_seconds_count{"):
			c.dequeued += v
		case strings.HasPrefix(line, "trustplane_registration_passes_total{") && strings.Contains(line, `kind="incremental"`):
			c.incremental += v
			if strings.Contains(line, `reason="eventsTaken"`) {
				c.eventsTaken += v
			}
		case strings.HasPrefix(line, "trustplane_registration_passes_total{"):
			labels, _, _ := strings.Cut(line[strings.IndexByte(line, '{')+1:], "}")
			c.full[label(labels, "reason")] += v
		case strings.HasPrefix(line, "go_gc_duration_seconds_count"):
			c.gcs += v
		case strings.HasPrefix(line, "go_gc_duration_seconds_sum"):
			c.gcPauseSeconds += v
		}
	})
	return c, err
}

// settle waits until the operator's counters stop moving for two seconds
// (the last sample's status write landed) and returns them.
func (p *process) settle(timeout time.Duration) (counters, error) {
	deadline := time.Now().Add(timeout)
	prev, err := p.metricsNow()
	if err != nil {
		return counters{}, err
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for range tick.C {
		cur, err := p.metricsNow()
		if err != nil {
			return counters{}, err
		}
		if cur == prev || time.Now().After(deadline) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// rssDetail returns RssAnon and RssFile in MiB.
func (p *process) rssDetail() (anon, file float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "RssAnon:":
			anon = kb / 1024
		case "RssFile:":
			file = kb / 1024
		}
	}
	return anon, file
}

// rss returns the resident set size in MiB.
func (p *process) rss() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

// cpuSeconds returns user+system CPU time of the process.
func (p *process) cpuSeconds() (float64, error) {
	_, secs, err := statCPU(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	return secs, err
}

// statCPU reads a /proc/<pid>/stat file: the command name and the
// user+system CPU time in seconds (at the kernel's 100 ticks a second).
func statCPU(path string) (command string, seconds float64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open || closing+2 > len(s) {
		return "", 0, fmt.Errorf("%s: unexpected format", path)
	}
	f := strings.Fields(s[closing+2:])
	if len(f) < 13 {
		return "", 0, fmt.Errorf("%s: unexpected format", path)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return s[open+1 : closing], (ut + st) / 100, nil
}

// cpuByCommand returns the CPU time of every process of the machine,
// summed by command name, keyed also by pid so that a stretch counts only
// processes alive at both ends.
func cpuByCommand() map[int]procCPU {
	out := map[int]procCPU{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if command, secs, err := statCPU("/proc/" + d.Name() + "/stat"); err == nil {
			out[pid] = procCPU{command: command, seconds: secs}
		}
	}
	return out
}

// procCPU is one process's command and CPU time.
type procCPU struct {
	command string
	seconds float64
}

// cpuStretch prints the CPU time each command took from before to after,
// the busiest first, those above 0.1 s; processes that started or ended
// in between are left out.
func cpuStretch(before, after map[int]procCPU) string {
	by := map[string]float64{}
	for pid, a := range after {
		if b, ok := before[pid]; ok && b.command == a.command {
			by[a.command] += a.seconds - b.seconds
		}
	}
	names := slices.Collect(maps.Keys(by))
	slices.SortFunc(names, func(x, y string) int { return cmp.Compare(by[y], by[x]) })
	var parts []string
	for _, n := range names {
		if by[n] >= 0.1 {
			parts = append(parts, fmt.Sprintf("%s %.1fs", n, by[n]))
		}
	}
	return strings.Join(parts, ", ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
