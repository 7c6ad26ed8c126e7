package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// gapBound is the longest a required entry may be absent: the time a
// fail-over takes (a lease, plus a candidate's retry period).
const gapBound = leaseDuration + retryPeriod

// checker runs the invariant checks.
type checker struct {
	o         *oracle
	rep       *Report
	fs        *foreign
	gaps      *gapTracker
	src       *sourceCAs
	cl        *framework.Local
	spireDown *sync.RWMutex
	audit     *auditLog

	mu        sync.Mutex
	spireEver map[string]bool // fingerprints of every SPIRE authority seen
	// presentSeen counts required entries found present, to show the gap
	// measurement saw entries at all.
	presentSeen int
	reported    map[string]bool
}

// once reports a violation the first time its key is seen.
func (ch *checker) once(key, inv, format string, args ...any) {
	ch.mu.Lock()
	if ch.reported == nil {
		ch.reported = map[string]bool{}
	}
	seen := ch.reported[key]
	ch.reported[key] = true
	ch.mu.Unlock()
	if !seen {
		ch.rep.violate(inv, format, args...)
	}
}

func (ch *checker) foreign(ctx context.Context) {
	n, changed, err := ch.fs.changes(ctx, ch.cl)
	if err != nil {
		return // a component is restarting: no verdict
	}
	ch.rep.checked(InvForeign, n)
	for _, c := range changed {
		ch.once("foreign "+c, InvForeign, "%s", c)
	}
}

// entries checks that no two of our entries are identical and measures
// the gaps of required entries.
func (ch *checker) entries(ctx context.Context) {
	if !ch.spireDown.TryRLock() {
		return
	}
	readAt := time.Now()
	all, err := ch.o.spireEntries(ctx)
	ch.spireDown.RUnlock()
	if err != nil {
		return
	}
	d, err := ch.o.desired(ctx)
	if err != nil {
		return
	}
	present := map[string]bool{}
	count := map[entryKey][]string{}
	for _, e := range all {
		if !ch.o.ours(e.Id) {
			continue
		}
		k := keyOf(e)
		count[k] = append(count[k], e.Id)
		for key := range d.required {
			ns, sa, _ := cutSlash(key)
			if k == ch.o.workloadKey(ns, sa) {
				present[key] = true
			}
		}
	}
	ch.rep.checked(InvSpireExact, len(count))
	for k, ids := range count {
		if len(ids) > 1 {
			ch.once("dup "+k.String(), InvSpireExact, "duplicate entries %v for %s", ids, k)
		}
	}
	ended, ongoing := ch.gaps.observe(readAt, present, d.required)
	ch.rep.checked(InvIdentityGap, len(d.required))
	ch.mu.Lock()
	ch.presentSeen += len(present)
	ch.mu.Unlock()
	for k, g := range ended {
		ch.gapSeen(k, g, readAt)
	}
	for k, g := range ongoing {
		ch.gapSeen(k, g, readAt)
	}
}

func (ch *checker) gapSeen(key string, gap time.Duration, at time.Time) {
	ch.rep.gap(key, gap)
	if gap > gapBound {
		ch.once(fmt.Sprintf("gap %s %d", key, at.Add(-gap).UnixNano()), InvIdentityGap,
			"entry of %s absent for %s (since %s) while its pods run", key, gap.Round(time.Millisecond), at.Add(-gap).Format(time.RFC3339Nano))
	}
}

func (ch *checker) spireAuthorities(ctx context.Context) (map[string]bool, error) {
	if !ch.spireDown.TryRLock() {
		return nil, fmt.Errorf("spire-server restarting")
	}
	defer ch.spireDown.RUnlock()
	now, err := ch.o.spireAuthorities(ctx)
	if err != nil {
		return nil, err
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for fp := range now {
		ch.spireEver[fp] = true
	}
	return now, nil
}

func (ch *checker) targets(ctx context.Context) ([]corev1.ConfigMap, error) {
	list := &corev1.ConfigMapList{}
	if err := ch.o.c.List(ctx, list, client.MatchingFields{"metadata.name": targetName}); err != nil {
		return nil, err
	}
	var out []corev1.ConfigMap
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Namespace, "chaos-") {
			out = append(out, cm)
		}
	}
	return out, nil
}

// bundles checks every target: a complete, valid bundle, never a
// corrupted source's certificate, never one no source held.
func (ch *checker) bundles(ctx context.Context) {
	_, _ = ch.spireAuthorities(ctx) // best effort: what SPIRE held before the targets are read
	cms, err := ch.targets(ctx)
	if err != nil {
		return
	}
	for _, cm := range cms {
		ch.rep.checked(InvBundle, 1)
		if problem := ch.targetProblem(ctx, cm.Data[targetKey]); problem != "" {
			ch.once(fmt.Sprintf("bundle %s/%s %s %s", cm.Namespace, cm.Name, cm.ResourceVersion, problem), InvBundle,
				"target %s/%s (resourceVersion %s): %s", cm.Namespace, cm.Name, cm.ResourceVersion, problem)
		}
	}
}

// unknownCert starts the problem of a certificate no source ever held.
const unknownCert = "holds a certificate no source ever held"

// targetProblem is what is wrong with a target's bundle, "" if nothing. A
// certificate of no known source is checked again after reading SPIRE,
// which may have rotated since it was last read.
func (ch *checker) targetProblem(ctx context.Context, data string) string {
	p := ch.classifyTarget(data)
	if strings.HasPrefix(p, unknownCert) {
		if _, err := ch.spireAuthorities(ctx); err == nil {
			p = ch.classifyTarget(data)
		}
	}
	return p
}

// classifyTarget checks a bundle against every source version seen.
func (ch *checker) classifyTarget(data string) string {
	certs, err := parseTarget(data)
	if err != nil {
		return "invalid bundle: " + err.Error()
	}
	fromSpire, fromSource := 0, 0
	for _, c := range certs {
		good, bad := ch.src.classify(c)
		if bad {
			return fmt.Sprintf("holds %s of a corrupted source version", c.Subject)
		}
		ch.mu.Lock()
		spire := ch.spireEver[fingerprint(c)]
		ch.mu.Unlock()
		switch {
		case spire:
			fromSpire++
		case good:
			fromSource++
		default:
			return fmt.Sprintf("%s: %s", unknownCert, c.Subject)
		}
	}
	if fromSpire == 0 || fromSource == 0 {
		return fmt.Sprintf("partial: %d SPIRE and %d source certificates", fromSpire, fromSource)
	}
	return ""
}

// bindings checks that no two bindings' outputs could match one pod.
func (ch *checker) bindings(ctx context.Context) {
	d, err := ch.o.desired(ctx)
	if err != nil {
		return
	}
	owners := make([]string, 0, len(d.outputs))
	for o := range d.outputs {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	ch.rep.checked(InvBindings, len(owners))
	for i := range owners {
		for j := i + 1; j < len(owners); j++ {
			for _, a := range d.outputs[owners[i]] {
				for _, b := range d.outputs[owners[j]] {
					if a.overlaps(b) {
						ch.once("bindings "+owners[i]+owners[j]+a.String()+b.String(), InvBindings,
							"outputs of bindings %s and %s cover the same pods: %s and %s", owners[i], owners[j], a, b)
					}
				}
			}
		}
	}
}

// mismatch compares SPIRE with the desired entries and the targets with
// the sources; it returns what differs, nothing at quiescence.
func (ch *checker) mismatch(ctx context.Context, d *desired) ([]string, error) {
	all, err := ch.o.spireEntries(ctx)
	if err != nil {
		return nil, err
	}
	var diffs []string
	got := map[entryKey]int{}
	for _, e := range all {
		if !ch.o.ours(e.Id) {
			continue
		}
		k := keyOf(e)
		got[k]++
		ttl, want := d.keys[k]
		switch {
		case !want:
			diffs = append(diffs, "extra "+k.String())
		case ttl != 0 && e.X509SvidTtl != ttl:
			diffs = append(diffs, fmt.Sprintf("drift: %s has X509-SVID TTL %d, want %d", k, e.X509SvidTtl, ttl))
		}
	}
	for k := range d.keys {
		switch got[k] {
		case 0:
			diffs = append(diffs, "missing "+k.String())
		case 1:
		default:
			diffs = append(diffs, fmt.Sprintf("duplicate (%d) %s", got[k], k))
		}
	}
	spireNow, err := ch.spireAuthorities(ctx)
	if err != nil {
		return nil, err
	}
	want := ch.src.currentSet()
	for fp := range spireNow {
		want[fp] = true
	}
	cms, err := ch.targets(ctx)
	if err != nil {
		return nil, err
	}
	have := map[string]corev1.ConfigMap{}
	for _, cm := range cms {
		have[cm.Namespace] = cm
	}
	nsList := &corev1.NamespaceList{}
	if err := ch.o.c.List(ctx, nsList, client.MatchingLabels{managedLabel: "true"}); err != nil {
		return nil, err
	}
	for _, ns := range nsList.Items {
		if ns.Labels[bundleLabel] != "chaos" {
			continue
		}
		cm, ok := have[ns.Name]
		if !ok {
			diffs = append(diffs, "no target in "+ns.Name)
			continue
		}
		certs, err := parseTarget(cm.Data[targetKey])
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("target in %s: %v", ns.Name, err))
			continue
		}
		gotSet := map[string]bool{}
		for _, c := range certs {
			gotSet[fingerprint(c)] = true
		}
		if !sameSet(gotSet, want) {
			diffs = append(diffs, fmt.Sprintf("target in %s holds %d certificates, want the %d of SPIRE and the source", ns.Name, len(gotSet), len(want)))
		}
	}
	sort.Strings(diffs)
	return diffs, nil
}

// leaderless names an operator whose lease nobody holds now, "" if none.
func (ch *checker) leaderless() string {
	if err := ch.audit.refresh(); err != nil {
		return "every operator (audit log unreadable)"
	}
	for _, op := range framework.Operators {
		if _, ok := ch.audit.leader(op); !ok {
			return op
		}
	}
	return ""
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// quiesce finishes the rollouts and waits until SPIRE and the targets
// match the objects twice in a row, every replica running.
func (ch *checker) quiesce(ctx context.Context, w *world, sup *supervisor, replicas []string, lastFault time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var firstGood time.Time
	var last []string
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
		if !sup.allRunning(replicas) {
			firstGood, last = time.Time{}, []string{"a replica is not running"}
			continue
		}
		if missing := ch.leaderless(); missing != "" {
			firstGood, last = time.Time{}, []string{missing + " has no leader"}
			continue
		}
		d, err := ch.o.desired(ctx)
		if err != nil {
			continue
		}
		var outputs []entryKey
		for _, ks := range d.outputs {
			outputs = append(outputs, ks...)
		}
		changed, err := w.settle(ctx, outputs)
		if err != nil || changed {
			firstGood = time.Time{}
			continue
		}
		diffs, err := ch.mismatch(ctx, d)
		if err != nil {
			continue
		}
		if len(diffs) > 0 {
			firstGood, last = time.Time{}, diffs
			continue
		}
		if firstGood.IsZero() {
			firstGood = time.Now()
			continue
		}
		ch.rep.checked(InvSpireExact, len(d.keys))
		ch.rep.checked(InvQuiescence, 1)
		ch.rep.Quiescence = firstGood.Sub(lastFault)
		return nil
	}
	ch.rep.checked(InvQuiescence, 1)
	tb := &unstructured.Unstructured{}
	tb.SetAPIVersion("bundle.trustplane.dev/v1alpha1")
	tb.SetKind("TrustBundle")
	conds := "unreadable"
	if err := ch.o.c.Get(ctx, client.ObjectKey{Name: bundleName}, tb); err == nil {
		c, _, _ := unstructured.NestedSlice(tb.Object, "status", "conditions")
		conds = fmt.Sprint(c)
	}
	ch.rep.violate(InvQuiescence, "not reached within %s of the end of churn; TrustBundle conditions: %s", timeout, conds)
	for _, diff := range last {
		ch.rep.violate(InvSpireExact, "at the end: %s", diff)
	}
	return nil
}
