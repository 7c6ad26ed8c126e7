package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// scaleSettings are the settings of BenchmarkScale, from the environment:
// BENCH_SCALE_SIZES (comma-separated workload counts, ascending; default
// 1000,10000,50000,100000, and 1000 with QUICK), BENCH_SCALE_CONCURRENCY
// (--spire-write-concurrency, default 4, the best setting of
// BenchmarkPostgres), BENCH_NODES (default 100), BENCH_SCALE_PER_NAMESPACE
// (workloads per namespace, default 100) and BENCH_SCALE_SAMPLES (new
// workloads timed per size, default 200, so the p99 is not the slowest
// sample alone). BENCH_SCALE_FLOORS=0 leaves the floors out, for comparing
// settings of the operator alone (say BENCH_GC_PERCENT) in less time.
// BENCH_SCALE_SPLIT=1 reads the operator's metrics before and after each
// sample and splits the slowest samples' time; it is off by default,
// because those reads (about a quarter of the operator's CPU while the
// samples run, and the garbage collections they cause) slow the very
// samples they split. BENCH_STATUS_MAX_WAIT sets the operator's
// --status-max-wait (default 1s). BENCH_SCALE_SETTLE (a duration, default 0) waits
// that long after the converge before the samples, so that they time a new
// workload in a cluster at rest rather than in the wake of the bulk load
// (PostgreSQL's autovacuum, the API server's and SPIRE's work on the
// entries just written). BENCH_SCALE_RECYCLE=1 deletes each sample's
// workload (pod, Deployment, service account) once it is timed and waits,
// untimed, for its entry to leave SPIRE, so that a size stays that size
// however many samples it takes (without it, each sample adds a workload).
type scaleSettings struct {
	sizes                                     []int
	concurrency, nodes, perNamespace, samples int
	noFloors, split, recycle                  bool
	settle                                    time.Duration
}

func loadScaleSettings() (scaleSettings, error) {
	s := scaleSettings{sizes: []int{1000, 10000, 50000, 100000}, concurrency: 4, nodes: 100, perNamespace: 100, samples: 200,
		noFloors: os.Getenv("BENCH_SCALE_FLOORS") == "0", split: os.Getenv("BENCH_SCALE_SPLIT") == "1",
		recycle: os.Getenv("BENCH_SCALE_RECYCLE") == "1"}
	if quick() {
		s.sizes = []int{1000}
	}
	for env, v := range map[string]*int{"BENCH_SCALE_CONCURRENCY": &s.concurrency, "BENCH_NODES": &s.nodes,
		"BENCH_SCALE_PER_NAMESPACE": &s.perNamespace, "BENCH_SCALE_SAMPLES": &s.samples} {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*v = n
		}
	}
	if v := os.Getenv("BENCH_SCALE_SETTLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return s, fmt.Errorf("BENCH_SCALE_SETTLE=%q: want a duration such as 90s", v)
		}
		s.settle = d
	}
	if list, err := positiveInts("BENCH_SCALE_SIZES"); err != nil {
		return s, err
	} else if list != nil {
		s.sizes = list
	}
	if !slices.IsSorted(s.sizes) {
		return s, fmt.Errorf("BENCH_SCALE_SIZES %v: sizes must ascend (each size adds workloads to the last)", s.sizes)
	}
	return s, nil
}

// BenchmarkScale is the sizing run: the production layout (workloads
// spread over namespaces, one pod each bound to one of the nodes,
// per-node parents) against a spire-server on PostgreSQL at INFO, at each
// size. Per size it prints the converge time from the policy's creation
// (fresh database, server and operator), the raw floor of the same
// entries written straight to SPIRE at the same write concurrency, the
// floor of spire-controller-manager's entry shape (one k8s:pod-uid selector,
// the same parents) at one call at a time and at the operator's
// concurrency, the operator's RSS, and the time from one new workload (its Deployment, then
// its pod) to its entry in SPIRE; at the end the new-workload p99 of every
// size side by side. Workloads are added between sizes, not re-created.
// Use -benchtime 1x.
func BenchmarkScale(b *testing.B) { runEach(b, loadScaleSettings, runScale) }

// scaleLayout places workload i: namespace, name and node.
type scaleLayout struct {
	perNamespace, nodes int
	nodeUIDs            []k8stypes.UID
}

func (l scaleLayout) namespace(i int) string { return fmt.Sprintf("scale-%d", i/l.perNamespace) }
func (l scaleLayout) name(i int) string      { return fmt.Sprintf("w-%d", i) }
func (l scaleLayout) node(i int) int         { return i % l.nodes }

// parent is the per-node parent ID of a pod on node index n.
func (l scaleLayout) parent(n int) string {
	return fmt.Sprintf("spiffe://%s/spire/agent/k8s_psat/%s/%s", trustDomain, benchCluster, l.nodeUIDs[n])
}

// floorEntry returns entry i of a raw floor under its per-node parent: the
// operator's shape when both is set, else one k8s:pod-uid selector (see
// floorEntry).
func (l scaleLayout) floorEntry(both bool) func(int) *types.Entry {
	return func(i int) *types.Entry {
		e := floorEntry(l.namespace(i), i, "", both)
		e.ParentId = spiffeIDOf(l.parent(l.node(i)))
		return e
	}
}

func runScale(b *testing.B, s scaleSettings) error {
	ctx := context.Background()
	rep := &report{}
	rep.add("# spiffe-operator at scale, %s: workloads (one service account and one pod each) %d per namespace over %d nodes, per-node parents, SPIRE at INFO on PostgreSQL, --spire-write-concurrency %d, --status-max-wait %s",
		time.Now().UTC().Format(time.RFC3339), s.perNamespace, s.nodes, s.concurrency, statusMaxWait())

	env, err := startPostgresBench(b)
	if err != nil {
		return err
	}
	defer env.stop()
	pg, cp, k8s, bin := env.pg, env.cp, env.k8s, env.bin
	uids, err := createNodes(ctx, k8s, s.nodes)
	if err != nil {
		return err
	}
	l := scaleLayout{perNamespace: s.perNamespace, nodes: s.nodes, nodeUIDs: uids}

	fresh := freshDatabases(ctx, pg, "scale")
	created := 0
	for _, n := range s.sizes {
		t0 := time.Now()
		if err := createScaleWorkloads(ctx, k8s, l, created, n); err != nil {
			return err
		}
		b.Logf("N=%d: added %d workloads in %s (load %s)", n, n-created, time.Since(t0).Round(time.Millisecond), loadAverage())
		created = n

		if s.noFloors {
			res, err := scaleSizeFresh(ctx, b, k8s, cp, bin, l, n, s, fresh)
			if err != nil {
				return err
			}
			rep.add("N=%d: converge %s (floors left out); %d entries in SPIRE; operator RSS %.1f MiB (anon %.1f, file %.1f), --gc-percent %s; one new workload to its entry (%d samples): p50 %s, p99 %s, max %s; load average %s",
				n, res.converge.Round(time.Millisecond), res.entries, res.rss, res.anon, res.file, gcPercent(), len(res.latencies),
				pct(res.latencies, 50), pct(res.latencies, 99), res.latencies[len(res.latencies)-1].Round(100*time.Microsecond), loadAverage())
			rep.samples(n, res)
			continue
		}
		opts, err := fresh()
		if err != nil {
			return err
		}
		floor, err := floorOf(ctx, opts, s.concurrency, n, l.floorEntry(true))
		if err != nil {
			return fmt.Errorf("N=%d floor: %w", n, err)
		}
		// SCM's shape: one k8s:pod-uid selector per entry, the same per-node
		// parents; once one call at a time, as spire-controller-manager
		// writes its batches, and once at the operator's concurrency.
		var scmFloors [2]time.Duration
		for j, c := range []int{1, s.concurrency} {
			if opts, err = fresh(); err != nil {
				return err
			}
			if scmFloors[j], err = floorOf(ctx, opts, c, n, l.floorEntry(false)); err != nil {
				return fmt.Errorf("N=%d one-selector floor at %d calls: %w", n, c, err)
			}
		}
		res, err := scaleSizeFresh(ctx, b, k8s, cp, bin, l, n, s, fresh)
		if err != nil {
			return err
		}
		rep.add("N=%d: converge %s = %.2fx the raw floor at %d calls at a time (%s); %d entries in SPIRE; operator RSS %.1f MiB (anon %.1f, file %.1f); one new workload to its entry (%d samples): p50 %s, p99 %s, max %s; load average %s",
			n, res.converge.Round(time.Millisecond), res.converge.Seconds()/floor.Seconds(), s.concurrency, floor.Round(time.Millisecond),
			res.entries, res.rss, res.anon, res.file, len(res.latencies), pct(res.latencies, 50), pct(res.latencies, 99),
			res.latencies[len(res.latencies)-1].Round(100*time.Microsecond), loadAverage())
		rep.add("N=%d: converge %s = %.2fx the one-selector (k8s:pod-uid) per-node floor at 1 call at a time (%s), %.2fx that floor at %d calls at a time (%s)",
			n, res.converge.Round(time.Millisecond), res.converge.Seconds()/scmFloors[0].Seconds(), scmFloors[0].Round(time.Millisecond),
			res.converge.Seconds()/scmFloors[1].Seconds(), s.concurrency, scmFloors[1].Round(time.Millisecond))
		rep.samples(n, res)
	}
	rep.newP99s()
	return rep.write(os.Getenv("BENCH_SCALE_OUT"))
}

// scaleSizeFresh runs scaleSize at size n on a fresh database and returns
// its result with the latencies sorted.
func scaleSizeFresh(ctx context.Context, b *testing.B, k8s client.WithWatch, cp *testenv.ControlPlane, bin string, l scaleLayout, n int, s scaleSettings,
	fresh func() (testenv.SpireOptions, error)) (scaleResult, error) {
	opts, err := fresh()
	if err != nil {
		return scaleResult{}, err
	}
	res, err := scaleSize(ctx, b, k8s, cp, bin, l, n, s, opts)
	if err != nil {
		return scaleResult{}, fmt.Errorf("N=%d: %w", n, err)
	}
	slices.Sort(res.latencies)
	slices.Sort(res.afterCreates)
	return res, nil
}

// scaleResult is what scaleSize measured at one size.
type scaleResult struct {
	converge time.Duration
	entries  int
	// recycled counts the samples removed once timed (BENCH_SCALE_RECYCLE).
	recycled        int
	rss, anon, file float64
	latencies       []time.Duration
	// afterCreates are the samples' times from the pod's creation (the
	// bench's own two API calls done) to the entry.
	afterCreates []time.Duration
	// api are the API server's times while the samples ran.
	api apiTimes
	// cpu is the CPU time each command took while the samples ran.
	cpu string
	// policySize is the policy object's size in JSON after the samples,
	// and policyParents the parent IDs its status holds.
	policySize, policyParents int
	// sampleCosts are the operator's costs while the samples ran.
	sampleCosts costs
	// slowest are the slowest samples, slowest first, each with the
	// operator's costs while it was timed.
	slowest []timedSample
	// windows are when the samples ran, in the order they ran,
	// statusWrites when the operator's status writes of the policy
	// landed meanwhile, and gcs when the operator's garbage collections
	// ran meanwhile.
	windows      []sampleWindow
	statusWrites []time.Time
	gcs          []span
}

// timedSample is one new workload's time to its entry and the operator's
// costs while it was timed.
type timedSample struct {
	latency time.Duration
	costs   costs
}

// slowestShown is how many of a size's slowest samples the report splits
// by where their time went.
const slowestShown = 3

// samples adds what the samples of size n measured: the operator's costs
// over all of them, and where the time of the slowest went.
func (r *report) samples(n int, res scaleResult) {
	r.add("N=%d: during the samples: %s", n, res.sampleCosts)
	r.add("N=%d: from the pod's creation (the bench's own API calls done) to the entry: p50 %s, p99 %s; the API server's own times: %s", n,
		pct(res.afterCreates, 50), pct(res.afterCreates, 99), res.api.means(
			apiCall{"POST", "deployments", ""}, apiCall{"POST", "pods", ""}, apiCall{"PATCH", "spifferegistrations", "status"}))
	r.add("N=%d: CPU by process during the samples, %s; the policy after the samples: %d bytes, %d parent IDs in its status", n, res.cpu,
		res.policySize, res.policyParents)
	writes := instants(res.statusWrites)
	r.add("N=%d: %s; %s", n, overlapSamples("status writes landed", res.windows, writes, 95, statusWriteGrace),
		overlapSamples("", res.windows, writes, 99, statusWriteGrace).tailClause())
	gcs := fmt.Sprintf("garbage collections of the operator (wall time %s) ran", spanTimes(res.gcs))
	r.add("N=%d: %s; %s", n, overlapSamples(gcs, res.windows, res.gcs, 95, 0), overlapSamples("", res.windows, res.gcs, 99, 0).tailClause())
	for i, s := range res.slowest {
		r.add("N=%d: slowest sample %d of %d, %s", n, i+1, len(res.latencies), s.costs.within(s.latency))
	}
	if res.recycled > 0 {
		r.add("N=%d: each of the %d samples' workloads was removed once timed, so the size stayed %d", n, res.recycled, n)
	}
	r.p99s = append(r.p99s, sizeP99{n: n, p99: pct(res.latencies, 99), blocks: blockP99s(res.windows, sampleBlock)})
}

// scaleSize starts a fresh server (opts) and operator, times a policy
// selecting the n workloads to all n entries registered, reads the RSS,
// then times s.samples new workloads, one at a time, in a namespace of
// this size's own, and removes the policy, operator and server.
func scaleSize(ctx context.Context, b *testing.B, k8s client.WithWatch, cp *testenv.ControlPlane, bin string, l scaleLayout, n int, s scaleSettings,
	opts testenv.SpireOptions) (scaleResult, error) {
	var res scaleResult
	srv, err := testenv.StartSpire(opts)
	if err != nil {
		return res, err
	}
	defer func() { _ = srv.Cleanup() }()
	proc, err := startOperator(bin, cp.KubeconfigPath, srv.SocketPath, "--cluster-name", benchCluster,
		"--spire-write-concurrency", strconv.Itoa(s.concurrency))
	if err != nil {
		return res, err
	}
	defer proc.stop()
	if err := proc.waitReady(ctx); err != nil {
		return res, err
	}
	// The samples' namespace is labelled for this size only, so that the
	// next size's policy does not select it, and made before the policy:
	// a selected namespace created later gives the policy a full pass,
	// which the first sample would then wait for.
	samplesNS := fmt.Sprintf("scale-new-%d", n)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: samplesNS, Labels: map[string]string{"scale": samplesNS}}}); err != nil {
		return res, err
	}
	policy := &v1alpha1.SpiffeRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("scale-%d", n)},
		Spec: v1alpha1.SpiffeRegistrationSpec{
			TrustDomain: trustDomain,
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "scale", Operator: metav1.LabelSelectorOpIn, Values: []string{"on", samplesNS}},
			}},
		},
	}
	start := time.Now()
	if err := k8s.Create(ctx, policy); err != nil {
		return res, err
	}
	if err := waitRegistered(ctx, k8s, policy, n, 90*time.Minute); err != nil {
		return res, err
	}
	res.converge = time.Since(start)
	if res.rss, err = proc.rss(); err != nil {
		return res, err
	}
	res.anon, res.file = proc.rssDetail()
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		return res, err
	}
	defer func() { _ = closer.Close() }()
	all, err := spire.NewClient(conn, spire.Options{}).ListAll(ctx)
	if err != nil {
		return res, err
	}
	if res.entries = len(all); res.entries != n {
		return res, fmt.Errorf("the policy reports %d entries registered, SPIRE holds %d", n, res.entries)
	}
	prefix, err := proc.entryIDPrefix()
	if err != nil {
		return res, err
	}
	ids := entries.IDScheme{Prefix: prefix}
	tag := entries.OwnerTag(policy.UID)
	samples := scaleLayout{perNamespace: s.samples, nodes: l.nodes, nodeUIDs: l.nodeUIDs}
	if s.settle > 0 {
		b.Logf("N=%d: settling %s before the samples (load %s)", n, s.settle, loadAverage())
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(s.settle):
		}
		b.Logf("N=%d: samples start (load %s)", n, loadAverage())
	}
	// The samples are timed by the commit notifications of SPIRE's
	// database, installed now, so the converge above ran without them.
	notifier, err := listenForEntries(ctx, opts.PostgresConnection)
	if err != nil {
		return res, err
	}
	defer func() { _ = notifier.close() }()
	// From here on the policy's only writer is the operator's status
	// write; the report says how often one ran alongside a slow sample.
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		return res, err
	}
	writes, err := watchStatusWrites(ctx, k8s, policy.Name, policy.ResourceVersion)
	if err != nil {
		return res, err
	}
	defer func() { _, _ = writes.close() }()
	before, err := proc.costsNow()
	if err != nil {
		return res, err
	}
	apiBefore, err := apiServerTimes(ctx, cp.Config)
	if err != nil {
		return res, err
	}
	cpuBefore, samplesStart := cpuByCommand(), time.Now()
	proc.heapProfile(b, fmt.Sprintf("scale-before-samples-%d", n))
	stopCPU := proc.cpuProfile(b, fmt.Sprintf("scale-samples-%d", n))
	waitAPIProfile := apiServerProfile(ctx, b, cp.Config, fmt.Sprintf("scale-samples-%d", n))
	// timed holds each sample with the operator's costs while it ran,
	// only when the split asks for them.
	var timed []timedSample
	for j := range s.samples {
		var c0 costs
		if s.split {
			if c0, err = proc.costsNow(); err != nil {
				return res, err
			}
		}
		t0, d, creates, err := timeNewWorkload(ctx, k8s, entryv1.NewEntryClient(conn), notifier, ids, tag, samplesNS, samples, j)
		if err != nil {
			return res, err
		}
		if s.recycle {
			e := sampleEntry(samplesNS, samples, j)
			if err := removeSample(ctx, k8s, notifier, ids.EntryID(tag, e.Key()), samplesNS, samples, j); err != nil {
				return res, err
			}
			res.recycled++
		}
		res.windows = append(res.windows, sampleWindow{start: t0, took: d})
		res.latencies = append(res.latencies, d)
		res.afterCreates = append(res.afterCreates, d-creates)
		if s.split {
			c1, err := proc.costsNow()
			if err != nil {
				return res, err
			}
			timed = append(timed, timedSample{latency: d, costs: c1.sub(c0)})
		}
	}
	stopCPU()
	waitAPIProfile()
	if res.statusWrites, err = writes.close(); err != nil {
		return res, err
	}
	if len(res.windows) > 0 {
		last := res.windows[len(res.windows)-1]
		if res.gcs, err = proc.gcCycles(res.windows[0].start, last.start.Add(last.took)); err != nil {
			return res, err
		}
	}
	proc.heapProfile(b, fmt.Sprintf("scale-after-samples-%d", n))
	if s.split {
		slices.SortFunc(timed, func(a, b timedSample) int { return cmp.Compare(b.latency, a.latency) })
		res.slowest = timed[:min(slowestShown, len(timed))]
	}
	after, err := proc.costsNow()
	if err != nil {
		return res, err
	}
	res.sampleCosts = after.sub(before)
	apiAfter, err := apiServerTimes(ctx, cp.Config)
	if err != nil {
		return res, err
	}
	res.api = apiAfter.since(apiBefore)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(policy), policy); err != nil {
		return res, err
	}
	raw, err := json.Marshal(policy)
	if err != nil {
		return res, err
	}
	res.policySize, res.policyParents = len(raw), len(policy.Status.ParentIDs)
	res.cpu = fmt.Sprintf("over %s: %s", time.Since(samplesStart).Round(100*time.Millisecond), cpuStretch(cpuBefore, cpuByCommand()))
	return res, discard(ctx, k8s, srv, proc, policy)
}

// statusWriteGrace is how long after a sample's end a status write may
// land and still count as having run alongside it: about the API server's
// own time for one (its mean was 14-20 ms in the runs of the docs).
const statusWriteGrace = 25 * time.Millisecond

// timeNewWorkload creates workload j of layout l in namespace ns (its
// service account first, untimed), then its Deployment and its pod bound
// to its node, as a controller and the scheduler would, and times from the
// Deployment's creation to the commit of its entry in SPIRE's database,
// which notifier announces; creates is how long the two create calls of
// that took. It then reads the entry through SPIRE's API, untimed, and
// fails unless SPIRE serves it with the workload's SPIFFE ID and selectors
// under that node's parent. t0 is when the Deployment's creation began.
func timeNewWorkload(ctx context.Context, k8s client.Client, c entryv1.EntryClient, notifier *entryNotifier, ids entries.IDScheme, tag, ns string,
	l scaleLayout, j int) (t0 time.Time, d, creates time.Duration, err error) {
	name, node := l.name(j), l.node(j)
	if err := k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		return time.Time{}, 0, 0, err
	}
	e := sampleEntry(ns, l, j)
	id := ids.EntryID(tag, e.Key())
	committed := notifier.expect(id)
	t0 = time.Now()
	if err := k8s.Create(ctx, deployment(ns, name, name)); err != nil {
		return time.Time{}, 0, 0, err
	}
	if err := k8s.Create(ctx, scalePod(ns, name, node)); err != nil {
		return time.Time{}, 0, 0, err
	}
	creates = time.Since(t0)
	at, err := committed(ctx, time.Minute)
	if err != nil {
		return time.Time{}, 0, 0, fmt.Errorf("entry of %s/%s: %w", ns, name, err)
	}
	got, err := c.GetEntry(ctx, &entryv1.GetEntryRequest{Id: id})
	if err != nil {
		return time.Time{}, 0, 0, fmt.Errorf("entry %s of %s/%s announced but not served: %w", id, ns, name, err)
	}
	served, err := entries.FromProto(got)
	if err != nil {
		return time.Time{}, 0, 0, fmt.Errorf("entry %s of %s/%s: %w", id, ns, name, err)
	}
	if served.Normalize(); served.Key() != e.Key() {
		return time.Time{}, 0, 0, fmt.Errorf("entry %s of %s/%s is %s under %s with %v, want %s under %s with %v", id, ns, name,
			served.SpiffeID, served.ParentID, served.Selectors, e.SpiffeID, e.ParentID, e.Selectors)
	}
	return t0, at.Sub(t0), creates, nil
}

// sampleEntry is the entry workload j of layout l in namespace ns is to
// have.
func sampleEntry(ns string, l scaleLayout, j int) entries.Entry {
	name := l.name(j)
	e := entries.Entry{
		SpiffeID:  spiffeid.RequireFromString(fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", trustDomain, ns, name)),
		ParentID:  spiffeid.RequireFromString(l.parent(l.node(j))),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:" + ns}, {Type: "k8s", Value: "sa:" + name}},
	}
	e.Normalize()
	return e
}

// removeSample deletes workload j of layout l in namespace ns (its pod at
// once, as a kubelet confirming the pod's end would, then its Deployment
// and service account) and waits for its entry, id, to leave SPIRE.
func removeSample(ctx context.Context, k8s client.Client, notifier *entryNotifier, id, ns string, l scaleLayout, j int) error {
	gone := notifier.expectGone(id)
	name := l.name(j)
	meta := metav1.ObjectMeta{Namespace: ns, Name: name}
	for _, obj := range []client.Object{&corev1.Pod{ObjectMeta: meta}, &appsv1.Deployment{ObjectMeta: meta}, &corev1.ServiceAccount{ObjectMeta: meta}} {
		if err := k8s.Delete(ctx, obj, client.GracePeriodSeconds(0)); err != nil {
			notifier.forget(goneMark + id)
			return fmt.Errorf("remove sample %s/%s: %w", ns, name, err)
		}
	}
	if _, err := gone(ctx, time.Minute); err != nil {
		return fmt.Errorf("entry of the removed sample %s/%s: %w", ns, name, err)
	}
	return nil
}

// createScaleWorkloads creates workloads from up to (not including) to of
// layout l: namespaces (labelled scale=on), service accounts, Deployments
// and one pod each.
func createScaleWorkloads(ctx context.Context, k8s client.Client, l scaleLayout, from, to int) error {
	for first := from - from%l.perNamespace; first < to; first += l.perNamespace {
		if first < from {
			continue
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.namespace(first), Labels: map[string]string{"scale": "on"}}}
		if err := k8s.Create(ctx, ns); err != nil {
			return err
		}
	}
	create := func(obj func(i int) client.Object) error {
		return parallel(to-from, func(k int) error { return k8s.Create(ctx, obj(from+k)) })
	}
	if err := create(func(i int) client.Object {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace(i), Name: l.name(i)}}
	}); err != nil {
		return err
	}
	if err := create(func(i int) client.Object { return deployment(l.namespace(i), l.name(i), l.name(i)) }); err != nil {
		return err
	}
	return create(func(i int) client.Object { return scalePod(l.namespace(i), l.name(i), l.node(i)) })
}

// scalePod is the pod of workload name (labelled as its Deployment
// selects), bound to node index node.
func scalePod(ns, name string, node int) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{ServiceAccountName: name, NodeName: fmt.Sprintf("node-%d", node), AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

// spiffeIDOf is the SPIRE API form of the SPIFFE ID id.
func spiffeIDOf(id string) *types.SPIFFEID {
	parsed := spiffeid.RequireFromString(id)
	return &types.SPIFFEID{TrustDomain: parsed.TrustDomain().Name(), Path: parsed.Path()}
}
