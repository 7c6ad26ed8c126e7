package spifferegistration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// listReader serves prebuilt lists, like the informer cache without copies.
type listReader struct {
	client.Reader
	ns     corev1.NamespaceList
	dep    appsv1.DeploymentList
	byName map[string]int
}

func (r *listReader) InNamespace(_ context.Context, _ v1alpha1.WorkloadKind, _ string, fn func(client.Object)) error {
	for i := range r.dep.Items {
		fn(&r.dep.Items[i])
	}
	return nil
}

// Get implements workload.Getter.
func (r *listReader) Get(_ context.Context, _ v1alpha1.WorkloadKind, _, name string) (client.Object, bool, error) {
	i, ok := r.byName[name]
	if !ok {
		return nil, false, nil
	}
	return &r.dep.Items[i], true, nil
}

func (r *listReader) List(_ context.Context, l client.ObjectList, _ ...client.ListOption) error {
	switch l := l.(type) {
	case *corev1.NamespaceList:
		*l = r.ns
	case *appsv1.DeploymentList:
		*l = r.dep
	}
	return nil
}

// getNamespace copies the namespace name of r.ns into obj; false when absent.
func (r *listReader) getNamespace(name string, obj client.Object) bool {
	for i := range r.ns.Items {
		if n, ok := obj.(*corev1.Namespace); ok && r.ns.Items[i].Name == name {
			r.ns.Items[i].DeepCopyInto(n)
			return true
		}
	}
	return false
}

// namespaceReader adds Get of namespaces to a listReader.
type namespaceReader struct{ *listReader }

func (r namespaceReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if !r.getNamespace(key.Name, obj) {
		return fmt.Errorf("namespace %s not found", key.Name)
	}
	return nil
}

// benchPolicy returns a handler and policy in steady state over n
// workloads, every entry registered, incremental passes on.
func benchPolicy(b *testing.B, n int) (*Handler, *v1alpha1.SpiffeRegistration, *listReader) {
	r := &listReader{ns: corev1.NamespaceList{Items: []corev1.Namespace{*ns("a", map[string]string{"spiffe": "on"})}}, byName: map[string]int{}}
	for i := range n {
		name := fmt.Sprintf("w-%d", i)
		d := deploy("a", name, name, map[string]string{"app": name})
		d.ResourceVersion = "1"
		r.byName[name] = len(r.dep.Items)
		r.dep.Items = append(r.dep.Items, *d)
	}
	api := spirefake.New()
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	h := &Handler{Reader: namespaceReader{r}, Lister: r, Syncer: s, TrustDomain: "example.org", Dirty: NewDirty()}
	p := newPolicy(nil)
	p.CreationTimestamp = metav1.Now()
	if err := h.CreateOrUpdate(context.Background(), p); err != nil {
		b.Fatal(err)
	}
	return h, p, r
}

// BenchmarkSteadyPass measures one full pass over N workloads when SPIRE
// already holds every entry: the cost of a resync pass that writes nothing.
func BenchmarkSteadyPass(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h, p, _ := benchPolicy(b, n)
			b.ResetTimer()
			for range b.N {
				if err := h.CreateOrUpdate(context.Background(), p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// eventPass changes the service account of workload i (so its entry is
// replaced: one create and one delete in SPIRE), records the change and
// runs the pass it triggers.
func eventPass(b *testing.B, h *Handler, p *v1alpha1.SpiffeRegistration, r *listReader, i int) {
	d := &r.dep.Items[i%len(r.dep.Items)]
	rv, _ := strconv.Atoi(d.ResourceVersion)
	d.ResourceVersion = strconv.Itoa(rv + 1)
	if rv%2 == 1 {
		d.Spec.Template.Spec.ServiceAccountName = d.Name + "-b"
	} else {
		d.Spec.Template.Spec.ServiceAccountName = d.Name
	}
	h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, d.Namespace, d.Name)
	if err := h.CreateOrUpdate(context.Background(), p); err != nil {
		b.Fatal(err)
	}
	if p.Status.EntriesRegistered != int32(len(r.dep.Items)) {
		b.Fatalf("registered %d of %d", p.Status.EntriesRegistered, len(r.dep.Items))
	}
}

// BenchmarkEventPass measures the pass one workload change triggers (one
// entry replaced in SPIRE) at 1,000 and 10,000 workloads, interleaved, and
// reports both and their ratio: flat in N means a ratio near 1.
func BenchmarkEventPass(b *testing.B) {
	h1, p1, r1 := benchPolicy(b, 1000)
	h10, p10, r10 := benchPolicy(b, 10000)
	var t1, t10 time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		eventPass(b, h1, p1, r1, i)
		mid := time.Now()
		eventPass(b, h10, p10, r10, i)
		t1 += mid.Sub(start)
		t10 += time.Since(mid)
	}
	b.ReportMetric(float64(t1.Nanoseconds())/float64(b.N), "ns/event@1k")
	b.ReportMetric(float64(t10.Nanoseconds())/float64(b.N), "ns/event@10k")
	b.ReportMetric(float64(t10)/float64(t1), "ratio@10k/1k")
}
