package spifferegistration

import (
	"context"
	"fmt"
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
	ns  corev1.NamespaceList
	dep appsv1.DeploymentList
}

func (r *listReader) InNamespace(_ context.Context, _ v1alpha1.WorkloadKind, _ string, fn func(client.Object)) error {
	for i := range r.dep.Items {
		fn(&r.dep.Items[i])
	}
	return nil
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

// BenchmarkSteadyPass measures one event-driven pass over N workloads when
// SPIRE already holds every entry: the cost of a pass that writes nothing.
func BenchmarkSteadyPass(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := &listReader{ns: corev1.NamespaceList{Items: []corev1.Namespace{*ns("a", map[string]string{"spiffe": "on"})}}}
			for i := range n {
				name := fmt.Sprintf("w-%d", i)
				d := deploy("a", name, name, map[string]string{"app": name})
				d.ResourceVersion = "1"
				r.dep.Items = append(r.dep.Items, *d)
			}
			api := spirefake.New()
			s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
			h := &Handler{Reader: r, Lister: r, Syncer: s, TrustDomain: "example.org"}
			p := newPolicy(nil)
			p.CreationTimestamp = metav1.Now()
			if err := h.CreateOrUpdate(context.Background(), p); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if err := h.CreateOrUpdate(context.Background(), p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
