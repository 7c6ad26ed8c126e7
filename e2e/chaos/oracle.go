package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// entryKey is what makes a SPIRE entry distinct: parent, SPIFFE ID and
// selectors (sorted, type:value).
type entryKey struct {
	Parent, ID, Selectors string
}

func (k entryKey) String() string { return k.ID + " under " + k.Parent + " [" + k.Selectors + "]" }

func newKey(parent, id string, selectors []string) entryKey {
	s := append([]string(nil), selectors...)
	sort.Strings(s)
	return entryKey{Parent: parent, ID: id, Selectors: strings.Join(s, ",")}
}

func idString(id *types.SPIFFEID) string {
	if id == nil {
		return ""
	}
	return "spiffe://" + id.TrustDomain + id.Path
}

func keyOf(e *types.Entry) entryKey {
	sels := make([]string, 0, len(e.Selectors))
	for _, s := range e.Selectors {
		sels = append(sels, s.Type+":"+s.Value)
	}
	return newKey(idString(e.ParentId), idString(e.SpiffeId), sels)
}

// matchesPod reports whether a pod of namespace ns running as sa with
// these labels matches every k8s:ns, k8s:sa and k8s:pod-label selector of
// the key (the only selector types the run's entries carry).
func (k entryKey) matchesPod(ns, sa string, labels map[string]string) bool {
	for _, s := range strings.Split(k.Selectors, ",") {
		switch {
		case strings.HasPrefix(s, "k8s:ns:"):
			if s != "k8s:ns:"+ns {
				return false
			}
		case strings.HasPrefix(s, "k8s:sa:"):
			if s != "k8s:sa:"+sa {
				return false
			}
		case strings.HasPrefix(s, "k8s:pod-label:"):
			kv := strings.TrimPrefix(s, "k8s:pod-label:")
			i := strings.LastIndex(kv, ":")
			if i < 0 || labels[kv[:i]] != kv[i+1:] {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// overlaps reports whether some pod could match both keys: same namespace
// and service account, no label with two different values.
func (k entryKey) overlaps(o entryKey) bool {
	parse := func(k entryKey) (ns, sa string, labels map[string]string) {
		labels = map[string]string{}
		for _, s := range strings.Split(k.Selectors, ",") {
			switch {
			case strings.HasPrefix(s, "k8s:ns:"):
				ns = strings.TrimPrefix(s, "k8s:ns:")
			case strings.HasPrefix(s, "k8s:sa:"):
				sa = strings.TrimPrefix(s, "k8s:sa:")
			case strings.HasPrefix(s, "k8s:pod-label:"):
				kv := strings.TrimPrefix(s, "k8s:pod-label:")
				if i := strings.LastIndex(kv, ":"); i >= 0 {
					labels[kv[:i]] = kv[i+1:]
				}
			}
		}
		return ns, sa, labels
	}
	ns1, sa1, l1 := parse(k)
	ns2, sa2, l2 := parse(o)
	if ns1 != ns2 || sa1 != sa2 {
		return false
	}
	for key, v := range l1 {
		if w, ok := l2[key]; ok && w != v {
			return false
		}
	}
	return true
}

// oracle computes what should be, from the objects alone, and reads what is.
type oracle struct {
	c      client.Client
	cl     *framework.Local
	td     string
	parent string
	prefix string // our entry ID prefix
}

// desired is the set of entries the objects want: one per (namespace,
// service account) of every selected Deployment of a registered namespace,
// with the policy's X509-SVID TTL, and one per SpiffeEntry.
type desired struct {
	keys map[entryKey]int32 // X509-SVID TTL in seconds, 0 for "not checked"
	// required are the (namespace, service account) pairs whose pods run
	// under a selected Deployment that runs as that account.
	required map[string]bool
	// outputs are the binding outputs, by owner UID.
	outputs map[string][]entryKey
}

func (o *oracle) desired(ctx context.Context) (*desired, error) {
	d := &desired{keys: map[entryKey]int32{}, required: map[string]bool{}, outputs: map[string][]entryKey{}}
	policy := &unstructured.Unstructured{}
	policy.SetAPIVersion("spiffe.trustplane.dev/v1alpha1")
	policy.SetKind("SpiffeRegistration")
	if err := o.c.Get(ctx, client.ObjectKey{Name: policyName}, policy); err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	ttlText, _, _ := unstructured.NestedString(policy.Object, "spec", "x509SVIDTTL")
	ttl, err := time.ParseDuration(ttlText)
	if err != nil {
		return nil, fmt.Errorf("policy TTL %q: %w", ttlText, err)
	}
	nsList := &corev1.NamespaceList{}
	if err := o.c.List(ctx, nsList, client.MatchingLabels{managedLabel: "true"}); err != nil {
		return nil, err
	}
	deps := &appsv1.DeploymentList{}
	if err := o.c.List(ctx, deps, client.MatchingLabels{managedLabel: "true"}); err != nil {
		return nil, err
	}
	pods := &corev1.PodList{}
	if err := o.c.List(ctx, pods, client.MatchingLabels{managedLabel: "true"}); err != nil {
		return nil, err
	}
	registered := map[string]bool{}
	for _, ns := range nsList.Items {
		registered[ns.Name] = ns.Labels[registerLabel] == "true"
	}
	selected := map[string]string{} // ns/deployment -> service account
	for _, dep := range deps.Items {
		if !registered[dep.Namespace] || dep.Labels[optOutLabel] != "" || dep.DeletionTimestamp != nil {
			continue
		}
		sa := dep.Spec.Template.Spec.ServiceAccountName
		selected[dep.Namespace+"/"+dep.Name] = sa
		d.keys[o.workloadKey(dep.Namespace, sa)] = int32(ttl.Seconds())
	}
	for _, p := range pods.Items {
		if sa, ok := selected[p.Namespace+"/"+p.Labels[appLabel]]; ok && sa == p.Spec.ServiceAccountName && p.DeletionTimestamp == nil {
			d.required[p.Namespace+"/"+sa] = true
		}
	}
	entries := &unstructured.UnstructuredList{}
	entries.SetAPIVersion("spiffe.trustplane.dev/v1alpha1")
	entries.SetKind("SpiffeEntryList")
	if err := o.c.List(ctx, entries); err != nil {
		return nil, err
	}
	for _, e := range entries.Items {
		if e.GetDeletionTimestamp() != nil {
			continue
		}
		parent, _, _ := unstructured.NestedString(e.Object, "spec", "parentID")
		id, _, _ := unstructured.NestedString(e.Object, "spec", "spiffeID")
		sels, _, _ := unstructured.NestedStringSlice(e.Object, "spec", "selectors")
		k := newKey(parent, id, sels)
		if _, ok := d.keys[k]; !ok {
			d.keys[k] = 0
		}
		if owner := e.GetLabels()["trustplane.dev/owner-uid"]; owner != "" && e.GetLabels()["trustplane.dev/owner-kind"] == "IdentityBinding" {
			d.outputs[owner] = append(d.outputs[owner], k)
		}
	}
	return d, nil
}

func (o *oracle) workloadKey(ns, sa string) entryKey {
	return newKey(o.parent, fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", o.td, ns, sa), []string{"k8s:ns:" + ns, "k8s:sa:" + sa})
}

// spireEntries lists every entry of the server.
func (o *oracle) spireEntries(ctx context.Context) ([]*types.Entry, error) {
	conn, err := o.cl.SpireConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var all []*types.Entry
	token := ""
	for {
		resp, err := entryv1.NewEntryClient(conn).ListEntries(ctx, &entryv1.ListEntriesRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list entries: %w", err)
		}
		all = append(all, resp.Entries...)
		if token = resp.NextPageToken; token == "" {
			return all, nil
		}
	}
}

// spireAuthorities returns the fingerprints of the X.509 authorities of
// the server's bundle.
func (o *oracle) spireAuthorities(ctx context.Context) (map[string]bool, error) {
	conn, err := o.cl.SpireConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	b, err := bundlev1.NewBundleClient(conn).GetBundle(ctx, &bundlev1.GetBundleRequest{})
	if err != nil {
		return nil, fmt.Errorf("get bundle: %w", err)
	}
	out := map[string]bool{}
	for _, a := range b.X509Authorities {
		out[derFingerprint(a.Asn1)] = true
	}
	return out, nil
}

// ours reports whether an entry ID has exactly the shape of our prefix,
// 12 hex digits, a dot and 20 hex digits.
func (o *oracle) ours(id string) bool {
	rest, ok := strings.CutPrefix(id, o.prefix)
	if !ok || len(rest) != 33 || rest[12] != '.' {
		return false
	}
	for i, r := range rest {
		if i == 12 {
			continue
		}
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

// gapTracker measures, for each required (namespace, service account),
// how long its entry was absent from SPIRE after it was first seen, while
// SPIRE answered. The generator touches a pair whenever it changes what
// requires it, which restarts its tracking.
type gapTracker struct {
	mu      sync.Mutex
	seen    map[string]bool      // present at least once since the last touch
	missing map[string]time.Time // absent since
	touched map[string]time.Time
}

func newGapTracker() *gapTracker {
	return &gapTracker{seen: map[string]bool{}, missing: map[string]time.Time{}, touched: map[string]time.Time{}}
}

func (g *gapTracker) touch(ns, sa string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := ns + "/" + sa
	delete(g.seen, k)
	delete(g.missing, k)
	g.touched[k] = time.Now()
}

func (g *gapTracker) touchNamespace(ns string) {
	for _, sa := range append([]string{modelSA}, serviceAccounts...) {
		g.touch(ns, sa)
	}
}

// observe records one reading: present pairs (from SPIRE, read at
// readAt) and required pairs (from the API, read after). It returns the
// gaps that ended, and the ongoing ones.
func (g *gapTracker) observe(readAt time.Time, present, required map[string]bool) (ended, ongoing map[string]time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ended, ongoing = map[string]time.Duration{}, map[string]time.Duration{}
	for k := range g.seen {
		if !required[k] {
			delete(g.seen, k)
			delete(g.missing, k)
		}
	}
	for k := range required {
		if t, ok := g.touched[k]; ok && !t.Before(readAt) {
			continue // changed after SPIRE was read: this reading says nothing
		}
		if present[k] {
			if since, ok := g.missing[k]; ok {
				ended[k] = readAt.Sub(since)
				delete(g.missing, k)
			}
			g.seen[k] = true
			continue
		}
		if !g.seen[k] {
			continue
		}
		if _, ok := g.missing[k]; !ok {
			g.missing[k] = readAt
		}
		ongoing[k] = readAt.Sub(g.missing[k])
	}
	return ended, ongoing
}
