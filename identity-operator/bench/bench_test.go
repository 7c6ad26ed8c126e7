package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/manager"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/conflict"
	ibcontroller "github.com/trustplane/trustplane/identity-operator/internal/controller"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/setup"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

const (
	bindings        = 1000
	serviceAccounts = 10
	trustDomain     = "example.org"
	parentID        = "spiffe://example.org/k8s-cluster-nodes"
)

// figure is one reported number.
type figure struct {
	value float64
	unit  string
}

// BenchmarkThousandBindings creates 1,000 bindings (10 service accounts,
// 100 variants each) and measures the operator until all are Ready.
func BenchmarkThousandBindings(b *testing.B) {
	td := spiffeid.RequireTrustDomainFromString(trustDomain)
	scheme, err := setup.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	external, err := testsupport.ExternalCRDs()
	if err != nil {
		b.Fatal(err)
	}
	cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{CRDDirectoryPaths: append(testsupport.OwnCRDs(), external...), Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			b.Error(err)
		}
	}()

	var calls atomic.Int64
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 200, 400
	testenv.ObserveRequests(cfg, func(*http.Request) { calls.Add(1) })

	fw := config.Default()
	fw.DefaultEnvironment = "bench"
	outputs := []output.Kind{output.KindSpiffeEntry}
	s := setup.Settings{
		Framework: fw, TrustDomain: td, ParentID: parentID, Outputs: outputs, Manager: manager.Options{MetricsAddr: "0", ProbeAddr: "0"},
		Handler: identitybinding.Options{TrustDomain: td, ParentID: parentID, Outputs: outputs},
	}
	mgr, err := ctrl.NewManager(cfg, setup.ManagerOptions(s, scheme))
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := setup.Register(ctx, mgr, s, reg); err != nil {
		b.Fatal(err)
	}
	go func() { _ = mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		b.Fatal("cache did not sync")
	}

	figures := map[string]figure{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ns := fmt.Sprintf("bench-%d", i)
		prepare(ctx, b, cp.Client, ns)
		calls.Store(0)
		reconcilesBefore := reconciles(b)
		start := time.Now()
		createBindings(ctx, b, cp.Client, ns)
		waitAllReady(ctx, b, cp.Client, ns)
		elapsed := time.Since(start)
		apiCalls := float64(calls.Load())
		recs := reconciles(b) - reconcilesBefore

		figures["s-to-all-ready"] = figure{elapsed.Seconds(), "s"}
		figures["reconciles"] = figure{recs, "reconciles"}
		figures["api-calls"] = figure{apiCalls, "calls"}
		figures["api-calls/reconcile"] = figure{apiCalls / recs, "calls/reconcile"}
		figures["api-calls/binding"] = figure{apiCalls / bindings, "calls/binding"}

		indexed, allPairs := conflictPasses(ctx, b, mgr.GetClient(), td, ns)
		figures["indexed-peers/reconcile"] = figure{indexed.candidates / bindings, "peers/reconcile"}
		figures["indexed-pass-ms"] = figure{float64(indexed.elapsed.Microseconds()) / 1000, "ms"}
		figures["allpairs-peers/reconcile"] = figure{allPairs.candidates / bindings, "peers/reconcile"}
		figures["allpairs-pass-ms"] = figure{float64(allPairs.elapsed.Microseconds()) / 1000, "ms"}
		if indexed.conflicts != allPairs.conflicts {
			b.Fatalf("indexed pass found %d conflicts, all-pairs pass %d", indexed.conflicts, allPairs.conflicts)
		}
	}
	b.StopTimer()
	report(b, figures)
}

func prepare(ctx context.Context, b *testing.B, c client.Client, ns string) {
	b.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	for k := 0; k < serviceAccounts; k++ {
		l := map[string]string{"app": fmt.Sprintf("pool-%d", k)}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pool-%d", k)},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: l},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: l},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.org/app:1"}}},
				},
			},
		}
		if err := c.Create(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
}

// createBindings creates bindings b-<sa>-<variant>: service account sa-k
// uses pool pool-k with 100 variants.
func createBindings(ctx context.Context, b *testing.B, c client.Client, ns string) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, bindings)
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				k, v := n%serviceAccounts, n/serviceAccounts
				ib := &v1alpha1.IdentityBinding{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("b-%d-%d", k, v)},
					Spec: v1alpha1.IdentityBindingSpec{
						PoolRef:            v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: fmt.Sprintf("pool-%d", k)},
						ServiceAccountName: fmt.Sprintf("sa-%d", k),
						IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: fmt.Sprintf("v%d", v)},
					},
				}
				if err := c.Create(ctx, ib); err != nil {
					errs <- err
				}
			}
		}()
	}
	for n := 0; n < bindings; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func waitAllReady(ctx context.Context, b *testing.B, c client.Client, ns string) {
	b.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var l v1alpha1.IdentityBindingList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
			return false, err
		}
		ready := 0
		for i := range l.Items {
			cond := meta.FindStatusCondition(l.Items[i].Status.Conditions, "Ready")
			if cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == l.Items[i].Generation {
				ready++
			}
		}
		return ready == bindings, nil
	})
	if err != nil {
		b.Fatalf("waiting for all %d bindings to be Ready: %v", bindings, err)
	}
}

// reconciles counts the identitybinding controller's reconciles so far.
func reconciles(b *testing.B) float64 {
	b.Helper()
	n, err := testsupport.Reconciles(ctrlmetrics.Registry, ibcontroller.Name)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

type pass struct {
	candidates float64
	conflicts  int
	elapsed    time.Duration
}

func member(td spiffeid.TrustDomain, ib *v1alpha1.IdentityBinding) conflict.Member {
	id, _ := index.SPIFFEID(td, ib)
	return conflict.Member{Namespace: ib.Namespace, Name: ib.Name, ServiceAccount: ib.Spec.ServiceAccountName, Variant: ib.Spec.IdentityBoundary.Variant, SPIFFEID: id}
}

// conflictPasses runs the conflict lookup of every binding twice from the
// operator's cache: through the indexes, as the handler does, and over all
// bindings of the namespace, as the reference design does.
func conflictPasses(ctx context.Context, b *testing.B, c client.Reader, td spiffeid.TrustDomain, ns string) (indexed, allPairs pass) {
	b.Helper()
	var all v1alpha1.IdentityBindingList
	if err := c.List(ctx, &all, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range all.Items {
		self := member(td, &all.Items[i])
		var group, same v1alpha1.IdentityBindingList
		if err := c.List(ctx, &group, client.InNamespace(ns), client.MatchingFields{index.FieldGroup: index.GroupKey(ns, self.ServiceAccount, self.Variant)}); err != nil {
			b.Fatal(err)
		}
		if err := c.List(ctx, &same, client.MatchingFields{index.FieldSPIFFEID: index.IDKey(self.SPIFFEID)}); err != nil {
			b.Fatal(err)
		}
		peers := make([]conflict.Member, 0, len(group.Items)+len(same.Items))
		for _, l := range [][]v1alpha1.IdentityBinding{group.Items, same.Items} {
			for j := range l {
				if l[j].Name != self.Name {
					peers = append(peers, member(td, &l[j]))
				}
			}
		}
		indexed.candidates += float64(len(peers))
		indexed.conflicts += len(conflict.Find(self, peers))
	}
	indexed.elapsed = time.Since(start)

	start = time.Now()
	for i := range all.Items {
		self := member(td, &all.Items[i])
		var nsList v1alpha1.IdentityBindingList
		if err := c.List(ctx, &nsList, client.InNamespace(ns)); err != nil {
			b.Fatal(err)
		}
		peers := make([]conflict.Member, 0, len(nsList.Items))
		for j := range nsList.Items {
			if nsList.Items[j].Name != self.Name {
				peers = append(peers, member(td, &nsList.Items[j]))
			}
		}
		allPairs.candidates += float64(len(peers))
		allPairs.conflicts += len(conflict.Find(self, peers))
	}
	allPairs.elapsed = time.Since(start)
	return indexed, allPairs
}

func report(b *testing.B, figures map[string]figure) {
	names := make([]string, 0, len(figures))
	for n := range figures {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	fmt.Fprintf(&sb, "identity-operator benchmark: %d bindings, %d service accounts, one namespace\n", bindings, serviceAccounts)
	for _, n := range names {
		f := figures[n]
		b.ReportMetric(f.value, n)
		fmt.Fprintf(&sb, "%-32s %12.3f %s\n", n, f.value, f.unit)
	}
	b.Log("\n" + sb.String())
	if out := os.Getenv("BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(sb.String()), 0o644); err != nil {
			b.Errorf("write BENCH_OUT: %v", err)
		}
	}
}
