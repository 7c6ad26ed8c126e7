package bench

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
)

// operatorUnderPolicies gives the operator's service account its generated
// ClusterRole, installs the admission policies the operator ships beside it
// (injection, targets, own resources) as they are written, waits until the
// two its writes meet here are in force, and returns a kubeconfig of that
// account.
func operatorUnderPolicies(ctx context.Context, b *testing.B, cp *testenv.ControlPlane, admin client.Client) string {
	rbac := filepath.Join("..", "config", "rbac")
	access, err := cp.AsServiceAccount(ctx, "trustplane-system", "bundle-operator", filepath.Join(rbac, "role.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	var manifests []string
	for _, f := range []string{"injection_policy", "target_policy", "own_resources_policy"} {
		manifests = append(manifests, filepath.Join(rbac, f+".yaml"), filepath.Join(rbac, f+"_binding.yaml"))
	}
	if err := testenv.CreateManifests(ctx, admin, manifests...); err != nil {
		b.Fatal(err)
	}
	asOperator, err := client.New(access.Config, client.Options{Scheme: admin.Scheme()})
	if err != nil {
		b.Fatal(err)
	}

	// The target policy: a ConfigMap that is not a target is refused.
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "trustplane-system", Name: "policy-probe"}}
	if err := testenv.UntilRefused(ctx, 30*time.Second, "creates only TrustBundle targets", func(int) error {
		err := asOperator.Create(ctx, probe.DeepCopy())
		if err == nil {
			if err := admin.Delete(ctx, probe.DeepCopy()); err != nil {
				b.Fatal(err)
			}
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}

	// The own-resources policy: a TrustBundle's spec is not the operator's
	// to change. The probe selects no namespace, and is gone before the
	// operator starts.
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-probe"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}},
			Target: v1alpha1.Target{
				ConfigMap:         &v1alpha1.ObjectTarget{Name: "policy-probe"},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"policy-probe": "none"}},
			},
		},
	}
	if err := admin.Create(ctx, tb); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := admin.Delete(ctx, tb); err != nil {
			b.Fatal(err)
		}
	}()
	if err := testenv.UntilRefused(ctx, 30*time.Second, "changes no spec of its own resources", func(n int) error {
		patch := client.RawPatch(types.MergePatchType,
			fmt.Appendf(nil, `{"spec":{"target":{"namespaceSelector":{"matchLabels":{"policy-probe":"p%d"}}}}}`, n))
		return asOperator.Patch(ctx, tb.DeepCopy(), patch)
	}); err != nil {
		b.Fatal(err)
	}
	return access.KubeconfigPath
}

// policyAdmission returns how many requests the API server's
// ValidatingAdmissionPolicy plugin admitted since it started, and the time
// it spent on them in all, from
// apiserver_admission_controller_admission_duration_seconds. The API
// server records a policy's own evaluation time only for refusals and
// errors; the plugin's time covers every admitted write, and the scenario
// makes the same requests in both runs, so the difference between the runs
// is what the operator's policies cost.
func policyAdmission(ctx context.Context, b *testing.B, cp *testenv.ControlPlane) (requests, seconds float64) {
	dc, err := discovery.NewDiscoveryClientForConfig(cp.Config)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("read the API server's metrics: %v", err)
	}
	const metric = "apiserver_admission_controller_admission_duration_seconds"
	match := []string{`name="ValidatingAdmissionPolicy"`, `type="validate"`, `rejected="false"`}
	if requests, err = sumSamples(bytes.NewReader(raw), metric+"_count", match...); err == nil {
		seconds, err = sumSamples(bytes.NewReader(raw), metric+"_sum", match...)
	}
	if err != nil {
		b.Fatal(err)
	}
	if requests == 0 {
		b.Fatal("the API server reports no request admitted by its ValidatingAdmissionPolicy plugin")
	}
	return requests, seconds
}
