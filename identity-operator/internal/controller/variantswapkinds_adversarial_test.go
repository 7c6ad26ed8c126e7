package controller_test

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/config"
	commonctrl "github.com/trustplane/trustplane/common/controller"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// kindsOperator is attackOperator with the output kinds given.
func kindsOperator(t *testing.T, c client.Client, outputs, served []output.Kind) *commonctrl.Controller[*v1alpha1.IdentityBinding] {
	t.Helper()
	h, err := identitybinding.New(c, identitybinding.Options{TrustDomain: attackTD, ParentID: parentID, APIReader: c,
		Outputs: outputs, ServedOutputs: served})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DefaultEnvironment = "prod"
	cfg.Environments = []string{"prod"}
	return commonctrl.New("prod", c, h, commonctrl.Options{Config: cfg, APIReader: c})
}

func clusterSPIFFEIDOf(t *testing.T, c client.Client, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u := output.New(output.KindClusterSPIFFEID).(*unstructured.Unstructured)
	if err := c.Get(context.Background(), client.ObjectKey{Name: output.Name(ns, name)}, u); err != nil {
		return nil
	}
	return u
}

func csidSelects(u *unstructured.Unstructured, sel string) bool {
	if u == nil {
		return false
	}
	l, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "workloadSelectorTemplates")
	return slices.Contains(l, sel)
}

// TestAVariantSwapAcrossAnOutputKindChangeConverges: a and b are Ready with
// ClusterSPIFFEID outputs (--output=ClusterSPIFFEID). The operator is
// restarted with --output=SpiffeEntry (ClusterSPIFFEID still served), and
// the two bindings swap their variants before its first passes. Each
// waits for the other's old ClusterSPIFFEID (peerOutputPending lists
// every served kind); holdsStaleOutput looked only at the configured
// kinds, so neither withdrew its own stale ClusterSPIFFEID: the pair
// waited on each other for good, each keeping an output selecting pods it
// no longer names (seen failing: both PeerOutputPending). It looks at
// every served kind now.
func TestAVariantSwapAcrossAnOutputKindChangeConverges(t *testing.T) {
	a := attackBindingIn("team", "a", "prod", "pa")
	b := attackBindingIn("team", "b", "prod", "pb")
	b.Spec.IdentityBoundary.Variant = "v2"
	c := attackFakeClient(t, nil, a, b, attackPool("team", "pa"), attackPool("team", "pb"))
	ka, kb := client.ObjectKeyFromObject(a), client.ObjectKeyFromObject(b)
	boundary := func(v string) string { return selector.PrefixBoundary + v }

	before := kindsOperator(t, c, []output.Kind{output.KindClusterSPIFFEID}, nil)
	attackReconcile(t, before, ka)
	attackReconcile(t, before, kb)
	if !csidSelects(clusterSPIFFEIDOf(t, c, "team", "a"), boundary("v1")) || !csidSelects(clusterSPIFFEIDOf(t, c, "team", "b"), boundary("v2")) {
		t.Fatalf("precondition: a and b have no ClusterSPIFFEID outputs for v1 and v2: a=%v b=%v", clusterSPIFFEIDOf(t, c, "team", "a"), clusterSPIFFEIDOf(t, c, "team", "b"))
	}

	attackEdit(t, c, ka, func(x *v1alpha1.IdentityBinding) { x.Spec.IdentityBoundary.Variant = "v2" })
	attackEdit(t, c, kb, func(x *v1alpha1.IdentityBinding) { x.Spec.IdentityBoundary.Variant = "v1" })

	after := kindsOperator(t, c, []output.Kind{output.KindSpiffeEntry}, []output.Kind{output.KindSpiffeEntry, output.KindClusterSPIFFEID})
	for range 10 {
		attackReconcile(t, after, ka)
		attackReconcile(t, after, kb)
	}
	for _, x := range []struct {
		key   types.NamespacedName
		stale string
	}{{ka, "v1"}, {kb, "v2"}} {
		if u := clusterSPIFFEIDOf(t, c, x.key.Namespace, x.key.Name); csidSelects(u, boundary(x.stale)) {
			t.Errorf("after 10 passes each, %s (variant changed away from %s) still has ClusterSPIFFEID %s selecting %s pods; Ready=%s",
				x.key.Name, x.stale, u.GetName(), x.stale, readyOf(t, c, x.key))
		}
	}
	ea, eb := attackEntry(t, c, "team", "a"), attackEntry(t, c, "team", "b")
	if ea == nil || !slices.Contains(ea.Spec.Selectors, boundary("v2")) || eb == nil || !slices.Contains(eb.Spec.Selectors, boundary("v1")) ||
		!condition.IsReady(attackGet(t, c, ka)) || !condition.IsReady(attackGet(t, c, kb)) {
		t.Errorf("the swap never converged: a Ready=%s, b Ready=%s", readyOf(t, c, ka), readyOf(t, c, kb))
	}
}
