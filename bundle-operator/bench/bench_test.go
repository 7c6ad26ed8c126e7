package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
)

const (
	// The operator's Kubernetes client limits: its flag defaults.
	operatorQPS   = "100"
	operatorBurst = "200"
	bundleName    = "bench"
	targetName    = "spire-ca"
	quiet         = 15 * time.Second
)

// sizes are the numbers of namespaces the scenario runs at, each on fresh
// servers; the figures of every size after the first are also given as a
// ratio to the first's. QUICK=1 (as in `make bench QUICK=1`) runs the first
// only.
func sizes() []int {
	if os.Getenv("QUICK") != "" {
		return []int{1000}
	}
	return []int{1000, 10000}
}

// BenchmarkTrustBundle runs the whole scenario once per size (-benchtime 1x),
// first with the operator as the cluster's administrator, then as its
// service account under the admission policies it ships (config/rbac),
// whose CEL the API server evaluates on each of its writes; the second
// run's figures are also given as a ratio to the first's.
// BENCH_OPERATOR_BIN runs a prebuilt operator binary instead of building
// cmd/, so that two builds can be measured in alternation.
func BenchmarkTrustBundle(b *testing.B) {
	bin := os.Getenv("BENCH_OPERATOR_BIN")
	if bin == "" {
		bin = buildOperator(b)
	}
	var first figures
	all := map[string]figures{}
	for _, n := range sizes() {
		var unrestricted figures
		for _, underPolicies := range []bool{false, true} {
			b.Run(fmt.Sprintf("namespaces=%d/policies=%t", n, underPolicies), func(b *testing.B) {
				for range b.N {
					f := runScenario(b, bin, n, underPolicies)
					switch {
					case underPolicies:
						f.ratios(b, unrestricted, "without the policies")
					case first == nil:
						first = f
					default:
						f.ratios(b, first, "the first size")
					}
					if !underPolicies {
						unrestricted = f
					}
					all[runName(n, underPolicies)] = f
				}
			})
		}
	}
	if out := os.Getenv("BENCH_OUT"); out != "" {
		writeFigures(b, out, all)
	}
}

// runName names a run in the figures file.
func runName(namespaces int, underPolicies bool) string {
	if underPolicies {
		return fmt.Sprintf("%d namespaces, as its service account under its policies", namespaces)
	}
	return fmt.Sprintf("%d namespaces", namespaces)
}

// figures are the measured values of one run, by name and unit.
type figures map[string]float64

// ratios reports, for the figures that scale with the number of
// namespaces or depend on the API server's admission, their ratio to those
// of base, the run named by what.
func (f figures) ratios(b *testing.B, base figures, what string) {
	if base == nil {
		return
	}
	for _, name := range []string{"fan-out time (s_fanout)", "fan-out writes per target (writes/target_fanout)",
		"rotation time (s_rotation)", "operator RSS (MiB_rss)", "operator anonymous RSS (MiB_rss_anon)",
		"operator Go heap in use (MiB_heap_inuse)", "API server's admission policy time, whole run (s_policy_admission)"} {
		if base[name] == 0 {
			continue
		}
		r := f[name] / base[name]
		f["ratio to "+what+": "+name] = r
		b.Logf("%s: %.3f x %s", name, r, what)
	}
}

// runScenario runs the scenario at a number of namespaces, with the operator
// as the cluster's administrator or, underPolicies, as its service account
// holding its ClusterRole under the admission policies of config/rbac.
func runScenario(b *testing.B, bin string, namespaces int, underPolicies bool) figures {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute*time.Duration(1+namespaces/2000))
	defer cancel()
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{
		CRDDirectoryPaths: []string{filepath.Join("..", "config", "crd", "bases")},
		Scheme:            scheme,
	})
	if err != nil {
		b.Fatalf("start control plane: %v", err)
	}
	defer func() { _ = cp.Stop() }()
	sp, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "example.org", LogLevel: "INFO"})
	if err != nil {
		b.Fatalf("start spire: %v", err)
	}
	defer func() { _ = sp.Cleanup() }()

	// The benchmark's own client must not be the bottleneck.
	cfg := *cp.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.NewWithWatch(&cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}

	createNamespaces(ctx, b, c, namespaces)

	kubeconfig := cp.KubeconfigPath
	if underPolicies {
		kubeconfig = operatorUnderPolicies(ctx, b, cp, c)
	}
	w := newTargetWatch(ctx, b, c, namespaces)
	sw := newStatusWatch(ctx, b, c)
	op := startOperator(ctx, b, bin, kubeconfig, sp.SocketPath)
	defer func() { op.stop() }() // the operator running at the end, after a restart too

	metrics := figures{}
	report := func(name string, v float64, unit string) {
		b.ReportMetric(v, unit)
		metrics[name+" ("+unit+")"] = v
		b.Logf("%s: %.3f %s", name, v, unit)
	}

	// 1. Fan-out from nothing.
	want := spireBundle(ctx, b, sp)
	start := time.Now()
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: bundleName, Labels: map[string]string{labels.Environment: "bench"}},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}},
			Target: v1alpha1.Target{
				ConfigMap:         &v1alpha1.ObjectTarget{Name: targetName},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "true"}},
			},
		},
	}
	if err := c.Create(ctx, tb); err != nil {
		b.Fatal(err)
	}
	w.waitAll(ctx, b, want)
	fanOut := time.Since(start)
	writes := w.takeWrites()
	report("fan-out time", fanOut.Seconds(), "s_fanout")
	report("fan-out writes per target", float64(writes)/float64(namespaces), "writes/target_fanout")
	report("fan-out write requests per target", op.writeRequests(b)/float64(namespaces), "requests/target_fanout")

	// 2. Resync with nothing changed: touch the TrustBundle and let the
	// periodic resync (requeue-after 5s in this run) and polls go by. The
	// fan-out's own status patch must land first.
	waitInSync(ctx, b, c, namespaces)
	w.takeWrites()
	before := op.writeRequests(b)
	touch(ctx, b, c)
	time.Sleep(quiet) // a measurement window, not synchronisation
	report("status writes of the first sync and the resync window", float64(sw.count()), "status_writes")
	report("resync writes", float64(w.takeWrites()), "writes_resync")
	report("resync write requests", op.writeRequests(b)-before, "requests_resync")

	// 3. Restart with nothing changed.
	op.stop()
	op = startOperator(ctx, b, bin, kubeconfig, sp.SocketPath)
	op.waitReconciled(ctx, b)
	time.Sleep(quiet) // a measurement window, not synchronisation
	report("restart writes", float64(w.takeWrites()), "writes_restart")
	report("restart write requests", op.writeRequests(b), "requests_restart")

	// 4. CA rotation.
	if _, err := sp.CLI(ctx, "localauthority", "x509", "prepare"); err != nil {
		b.Fatal(err)
	}
	rotated := spireBundle(ctx, b, sp)
	if rotated == want {
		b.Fatal("prepare did not change the SPIRE bundle")
	}
	start = time.Now()
	w.waitAll(ctx, b, rotated)
	report("rotation time", time.Since(start).Seconds(), "s_rotation")
	report("rotation writes per target", float64(w.takeWrites())/float64(namespaces), "writes/target_rotation")

	// What admission policies cost the API server over the whole run.
	requests, seconds := policyAdmission(ctx, b, cp)
	report("API server's admission policy time, whole run", seconds, "s_policy_admission")
	report("API server's admission policy time per admitted request", seconds/requests*1e6, "us/request_policy_admission")

	// 5. Memory of the operator process.
	mem := op.memory(b)
	report("operator RSS", mem["VmRSS:"]/(1<<20), "MiB_rss")
	report("operator peak RSS", mem["VmHWM:"]/(1<<20), "MiB_peak_rss")
	report("operator anonymous RSS", mem["RssAnon:"]/(1<<20), "MiB_rss_anon")
	report("operator file-backed RSS", mem["RssFile:"]/(1<<20), "MiB_rss_file")
	report("operator CPU time since its restart", op.cpuSeconds(b), "s_cpu")
	heap, err := op.scrape(b, "go_memstats_heap_inuse_bytes")
	if err != nil {
		b.Fatal(err)
	}
	report("operator Go heap in use", heap/(1<<20), "MiB_heap_inuse")
	return metrics
}

// writeFigures writes one "name: value" line per figure, sorted. A relative
// path is taken from the module root, where `make bench` runs go test (the
// test itself runs in bench/).
func writeFigures(b *testing.B, out string, all map[string]figures) {
	if !filepath.IsAbs(out) {
		out = filepath.Join("..", out)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "# bundle-operator benchmark, operator --kube-api-qps=%s --kube-api-burst=%s\n", operatorQPS, operatorBurst)
	for _, n := range sizes() {
		for _, underPolicies := range []bool{false, true} {
			run := runName(n, underPolicies)
			metrics, ok := all[run]
			if !ok {
				continue
			}
			names := make([]string, 0, len(metrics))
			for k := range metrics {
				names = append(names, k)
			}
			sort.Strings(names)
			fmt.Fprintf(&sb, "# %s\n", run)
			for _, k := range names {
				fmt.Fprintf(&sb, "%s, %s: %.3f\n", run, k, metrics[k])
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		b.Fatalf("create %s: %v", filepath.Dir(out), err)
	}
	if err := os.WriteFile(out, []byte(sb.String()), 0o644); err != nil {
		b.Fatalf("write %s: %v", out, err)
	}
}

// buildOperator builds the operator as the Dockerfile does (static, no cgo),
// so that its memory is that of the shipped binary.
func buildOperator(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "bundle-operator")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("build operator: %v\n%s", err, out)
	}
	return bin
}

func createNamespaces(ctx context.Context, b *testing.B, c client.Client, namespaces int) {
	var wg sync.WaitGroup
	errs := make(chan error, namespaces)
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-%05d", i), Labels: map[string]string{"bench": "true"}}}
				if err := c.Create(ctx, ns); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range namespaces {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("create namespace: %v", err)
	}
}

func spireBundle(ctx context.Context, b *testing.B, sp *testenv.Spire) string {
	shown, err := sp.BundlePEM(ctx)
	if err != nil {
		b.Fatal(err)
	}
	certs, err := bundle.ParsePEM([]byte(shown))
	if err != nil {
		b.Fatal(err)
	}
	return string(bundle.New(certs, nil).PEM())
}

// waitInSync waits until the TrustBundle's status reports every target in sync.
func waitInSync(ctx context.Context, b *testing.B, c client.Client, namespaces int) {
	for {
		tb := &v1alpha1.TrustBundle{}
		if err := c.Get(ctx, client.ObjectKey{Name: bundleName}, tb); err != nil {
			b.Fatal(err)
		}
		if int(tb.Status.TargetsInSync) == namespaces {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("status reports %d targets in sync, want %d", tb.Status.TargetsInSync, namespaces)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func touch(ctx context.Context, b *testing.B, c client.Client) {
	tb := &v1alpha1.TrustBundle{}
	if err := c.Get(ctx, client.ObjectKey{Name: bundleName}, tb); err != nil {
		b.Fatal(err)
	}
	orig := tb.DeepCopy()
	tb.Annotations = map[string]string{"bench/touched": time.Now().Format(time.RFC3339Nano)}
	if err := c.Patch(ctx, tb, client.MergeFrom(orig)); err != nil {
		b.Fatal(err)
	}
}

// targetWatch counts every change of a target ConfigMap (each ADDED or
// MODIFIED event is one write that reached etcd) and remembers its data.
type targetWatch struct {
	namespaces int
	mu         sync.Mutex
	data       map[string]string
	writes     int
	change     chan struct{}
}

// newTargetWatch lists the targets and watches them from the list's
// resourceVersion. A watch the server ends is resumed from the last
// resourceVersion seen, so no event is lost or counted twice.
func newTargetWatch(ctx context.Context, b *testing.B, c client.WithWatch, namespaces int) *targetWatch {
	ours := client.MatchingLabels{target.LabelTrustBundle: bundleName}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, ours); err != nil {
		b.Fatal(err)
	}
	w := &targetWatch{namespaces: namespaces, data: map[string]string{}, change: make(chan struct{}, 1)}
	for i := range list.Items {
		w.data[list.Items[i].Namespace] = list.Items[i].Data["ca.crt"]
	}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			wi, err := c.Watch(ctx, &corev1.ConfigMapList{}, ours,
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil { // retried; waitAll reports targets that never arrive
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			rv = w.consume(wi, rv)
			wi.Stop()
		}
	}()
	return w
}

// consume records the events of wi until it ends and returns the last
// resourceVersion seen.
func (w *targetWatch) consume(wi watch.Interface, rv string) string {
	for ev := range wi.ResultChan() {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok {
			continue // an error event ends the watch; it is resumed from rv
		}
		rv = cm.ResourceVersion
		if ev.Type == watch.Bookmark || cm.Name != targetName {
			continue
		}
		w.mu.Lock()
		switch ev.Type {
		case watch.Added, watch.Modified:
			w.writes++
			w.data[cm.Namespace] = cm.Data["ca.crt"]
		case watch.Deleted:
			w.writes++
			delete(w.data, cm.Namespace)
		}
		w.mu.Unlock()
		select {
		case w.change <- struct{}{}:
		default:
		}
	}
	return rv
}

// waitAll blocks until every namespace's target holds want.
func (w *targetWatch) waitAll(ctx context.Context, b *testing.B, want string) {
	for {
		w.mu.Lock()
		n := 0
		for _, v := range w.data {
			if v == want {
				n++
			}
		}
		w.mu.Unlock()
		if n == w.namespaces {
			return
		}
		select {
		case <-w.change:
		case <-time.After(time.Second):
		case <-ctx.Done():
			b.Fatalf("only %d of %d targets hold the bundle: %v", n, w.namespaces, ctx.Err())
		}
	}
}

func (w *targetWatch) takeWrites() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.writes
	w.writes = 0
	return n
}

// operator is the operator running as its own process, built from cmd/.
type operator struct {
	cmd         *exec.Cmd
	metricsAddr string
	done        chan struct{}
	stopOnce    sync.Once
}

func startOperator(ctx context.Context, b *testing.B, bin, kubeconfig, spireSocket string) *operator {
	port, err := testenv.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logFile, err := os.Create(filepath.Join(b.TempDir(), "operator.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin,
		"--spire-socket", spireSocket,
		"--metrics-bind-address", addr, "--metrics-secure=false", // read over loopback by the benchmark
		"--health-probe-bind-address", "0",
		"--kube-api-qps", operatorQPS, "--kube-api-burst", operatorBurst,
		"--requeue-after", "5s", "--jitter-factor", "0",
	)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The operator dies with the benchmark, also when that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	op := &operator{cmd: cmd, metricsAddr: addr, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(op.done)
	}()
	return op
}

func (o *operator) stop() {
	o.stopOnce.Do(func() {
		_ = o.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-o.done:
		case <-time.After(30 * time.Second):
			_ = o.cmd.Process.Kill()
			<-o.done
		}
	})
}

// scrape returns the sum of the samples of metric whose labels contain all of match.
func (o *operator) scrape(b *testing.B, metric string, match ...string) (float64, error) {
	resp, err := http.Get("http://" + o.metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum, err := sumSamples(resp.Body, metric, match...)
	_, _ = io.Copy(io.Discard, resp.Body)
	return sum, err
}

// sumSamples returns the sum of the samples of metric, in the Prometheus
// text format read from r, whose labels contain all of match.
func sumSamples(r io.Reader, metric string, match ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// writeRequests counts the operator's ConfigMap-affecting write requests
// (PATCH, PUT, POST, DELETE) since it started; it includes the few status
// patches of the TrustBundle.
func (o *operator) writeRequests(b *testing.B) float64 {
	var total float64
	for _, m := range []string{"PATCH", "PUT", "POST", "DELETE"} {
		v, err := o.scrape(b, "rest_client_requests_total", `method="`+m+`"`)
		if err != nil {
			b.Fatalf("scrape metrics: %v", err)
		}
		total += v
	}
	return total
}

// waitReconciled waits until the restarted operator reconciled the bundle.
func (o *operator) waitReconciled(ctx context.Context, b *testing.B) {
	for {
		// With --requeue-after every pass of a Ready TrustBundle ends in a
		// timed requeue, so a pass counts with either result.
		done, err := o.scrape(b, "controller_runtime_reconcile_total", `result="success"`)
		timed, errTimed := o.scrape(b, "controller_runtime_reconcile_total", `result="requeue_after"`)
		if err == nil && errTimed == nil && done+timed > 0 {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatal("the restarted operator never reconciled")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// cpuSeconds returns the CPU time (user and system) the operator used, from
// /proc/<pid>/stat, so that memory savings bought with CPU show.
func (o *operator) cpuSeconds(b *testing.B) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", o.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command name, which is in parentheses: utime
	// and stime are the 12th and 13th, in clock ticks of 1/100 s.
	_, after, _ := strings.Cut(string(data), ") ")
	f := strings.Fields(after)
	if len(f) < 13 {
		b.Fatalf("unexpected /proc/<pid>/stat: %s", data)
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("unexpected /proc/<pid>/stat: %s", data)
	}
	return (utime + stime) / 100
}

// memory returns the memory figures of /proc/<pid>/status in bytes, keyed
// by their field name (VmRSS:, VmHWM:, RssAnon:, RssFile:).
func (o *operator) memory(b *testing.B) map[string]float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if kb, err := strconv.ParseFloat(f[1], 64); err == nil && strings.HasSuffix(line, "kB") {
			out[f[0]] = kb * 1024
		}
	}
	return out
}

// statusWatch counts the writes of the TrustBundle's status that reached
// etcd: every watch event whose status differs from the one before.
type statusWatch struct {
	mu     sync.Mutex
	last   string
	writes int
}

// newStatusWatch watches the TrustBundles from now on; the bundle's
// creation carries an empty status, so only status writes count.
func newStatusWatch(ctx context.Context, b *testing.B, c client.WithWatch) *statusWatch {
	var list v1alpha1.TrustBundleList
	if err := c.List(ctx, &list); err != nil {
		b.Fatal(err)
	}
	wi, err := c.Watch(ctx, &v1alpha1.TrustBundleList{}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		b.Fatal(err)
	}
	s := &statusWatch{}
	go func() {
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			tb, ok := ev.Object.(*v1alpha1.TrustBundle)
			if !ok || tb.Name != bundleName || ev.Type == watch.Bookmark {
				continue
			}
			raw, err := json.Marshal(tb.Status)
			if err != nil {
				continue
			}
			s.mu.Lock()
			if ev.Type != watch.Added && string(raw) != s.last {
				s.writes++
			}
			s.last = string(raw)
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *statusWatch) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}
