package identitybinding_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/setup"
)

// These attacks drive the handler against controller-runtime's fake client
// (with the handler's indexes), not the envtest API server: they need no
// admission, only the handler's reads and writes.

func attackClient(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	s, err := setup.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...)
	for field, fn := range index.Funcs(td) {
		b = b.WithIndex(&v1alpha1.IdentityBinding{}, field, fn)
	}
	return b.Build()
}

func attackHandler(t *testing.T, c client.Client) *identitybinding.Handler {
	t.Helper()
	h, err := identitybinding.New(c, identitybinding.Options{TrustDomain: td, ParentID: "spiffe://example.org/nodes", APIReader: c})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func attackDeployment(namespace string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "llm"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}}}}
}

func attackBinding(namespace, name, env string, uid types.UID) *v1alpha1.IdentityBinding {
	return &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, Generation: 1, Labels: map[string]string{labels.Environment: env}},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef:            v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: "llm"},
			ServiceAccountName: "db",
			IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: "v1"},
		},
	}
}

// passAsController runs one pass as the Controller would (janitor of the
// binding's environment in the context, cleanup after success).
func passAsController(t *testing.T, h *identitybinding.Handler, c client.Client, b *v1alpha1.IdentityBinding) error {
	t.Helper()
	return passIn(t, h, c, c, b.Labels[labels.Environment], b)
}

// TestAdversarialOtherNamespacesCannotClaimOrWithdrawAVictimsIdentity: a
// victim binding victim/payments is Ready. Attackers in namespaces whose
// names are prefixes or extensions of the victim's (vic, victim-x, tim)
// and in an unrelated one copy its name, service account, variant and
// pool, under every environment label, with templates that repeat the
// victim's path. After all attacker passes the victim's next pass is still
// Ready with the same SPIFFE ID and output, no attacker output carries an
// ID outside its own ns/<ns>/sa/<sa>/, and no attacker records the victim
// as a conflict peer.
func TestAdversarialOtherNamespacesCannotClaimOrWithdrawAVictimsIdentity(t *testing.T) {
	victim := attackBinding("victim", "payments", "prod", "uid-victim")
	objs := []client.Object{victim, attackDeployment("victim")}
	templates := []string{"", "ns/victim/sa/db/pool/llm/variant/v1", "ns/vic{namespace}/sa/{serviceAccount}/pool/{pool}/variant/{variant}",
		"ns/{namespace}tim/sa/{serviceAccount}/pool/{pool}/variant/{variant}", "ns/{namespace}/sa/{serviceAccount}/../../../victim/sa/db/pool/llm/variant/v1",
		"ns/{namespace}/sa/{serviceAccount}/ns/victim/sa/db/pool/llm/variant/v1", "ns/{namespace}-x/sa/{serviceAccount}/pool/{pool}/variant/{variant}"}
	var attackers []*v1alpha1.IdentityBinding
	for _, ns := range []string{"vic", "victim-x", "tim", "attacker"} {
		objs = append(objs, attackDeployment(ns))
		for i, tmpl := range templates {
			for _, env := range []string{"prod", "default", "other", ""} {
				name := "payments"
				if i > 0 || env != "prod" {
					name = "payments-" + string(rune('a'+i)) + "-" + env + "x"
				}
				a := attackBinding(ns, name, env, types.UID("uid-"+ns+"-"+name))
				if env == "" {
					a.Labels[labels.Environment] = "default"
				}
				a.Spec.SPIFFEIDPathTemplate = tmpl
				attackers = append(attackers, a)
				objs = append(objs, a)
			}
		}
	}
	c := attackClient(t, objs...)
	h := attackHandler(t, c)
	if err := passAsController(t, h, c, victim); err != nil {
		t.Fatalf("victim's first pass: %v", err)
	}
	wantID := "spiffe://example.org/ns/victim/sa/db/pool/llm/variant/v1"
	if victim.Status.SPIFFEID != wantID {
		t.Fatalf("victim SPIFFE ID %q", victim.Status.SPIFFEID)
	}
	for _, a := range attackers {
		err := passAsController(t, h, c, a)
		if err != nil && !ctrlerrors.IsBlocked(err) {
			t.Fatalf("attacker %s/%s: unexpected error %v", a.Namespace, a.Name, err)
		}
		prefix := "spiffe://example.org/ns/" + a.Namespace + "/sa/db/"
		if a.Status.SPIFFEID != "" && !strings.HasPrefix(a.Status.SPIFFEID, prefix) {
			t.Fatalf("attacker %s/%s got %q", a.Namespace, a.Name, a.Status.SPIFFEID)
		}
		for _, cf := range a.Status.Conflicts {
			if !strings.HasPrefix(cf.Peer, a.Namespace+"/") {
				t.Fatalf("attacker %s/%s reports a conflict with %s", a.Namespace, a.Name, cf.Peer)
			}
		}
	}
	var entries spiffev1alpha1.SpiffeEntryList
	if err := c.List(context.Background(), &entries); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries.Items {
		ns := e.Labels[labels.OwnerNamespace]
		if !strings.HasPrefix(e.Spec.SpiffeID, "spiffe://example.org/ns/"+ns+"/sa/db/") || !containsSel(e.Spec.Selectors, "k8s:ns:"+ns) {
			t.Fatalf("output %s of %s: ID %s selectors %v", e.Name, ns, e.Spec.SpiffeID, e.Spec.Selectors)
		}
	}
	if err := passAsController(t, h, c, victim); err != nil {
		t.Fatalf("victim's pass after the attack: %v (conditions %v)", err, victim.Status.Conditions)
	}
	if victim.Status.SPIFFEID != wantID || len(victim.Status.Conflicts) != 0 {
		t.Fatalf("victim after the attack: ID %q conflicts %v", victim.Status.SPIFFEID, victim.Status.Conflicts)
	}
	e := &spiffev1alpha1.SpiffeEntry{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: output.Name("victim", "payments")}, e); err != nil {
		t.Fatalf("victim's output: %v", err)
	}
}

func containsSel(s []string, want string) bool {
	for _, x := range s {
		if x == want {
			return true
		}
	}
	return false
}

// forgedEntry is a SpiffeEntry whose owner-uid and owner-kind labels name
// owner's UID and kind while its owner-namespace and owner-name labels
// name another binding (other/someone-else): labels that do not parse
// exactly to owner.
func forgedEntry(name string, owner *v1alpha1.IdentityBinding) *spiffev1alpha1.SpiffeEntry {
	return &spiffev1alpha1.SpiffeEntry{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			labels.OwnerUID: string(owner.UID), labels.OwnerKind: "IdentityBinding",
			labels.OwnerNamespace: "other", labels.OwnerName: "someone-else", labels.Environment: "prod",
		}},
		Spec: spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/ns/other/sa/x/keep", ParentID: "spiffe://example.org/nodes",
			Selectors: []string{"k8s:ns:other", "k8s:sa:x"}},
	}
}

// TestAdversarialOutputNamingAnotherOwnerIsNotAdopted: an object sits at the
// binding's output name; its owner-uid/owner-kind labels name the binding
// but its owner-namespace/owner-name labels name another binding. Its
// owner labels do not parse exactly to the binding, so the guarantee says
// it is foreign: the pass must not rewrite it (ManagedOutputApplyFailed,
// object untouched).
func TestAdversarialOutputNamingAnotherOwnerIsNotAdopted(t *testing.T) {
	b := attackBinding("team", "b", "prod", "uid-team-b")
	forged := forgedEntry(output.Name("team", "b"), b)
	c := attackClient(t, b, attackDeployment("team"), forged)
	h := attackHandler(t, c)
	err := passAsController(t, h, c, b)
	got := &spiffev1alpha1.SpiffeEntry{}
	if gerr := c.Get(context.Background(), client.ObjectKeyFromObject(forged), got); gerr != nil {
		t.Fatalf("the foreign object was deleted: %v (pass error %v)", gerr, err)
	}
	if got.Spec.SpiffeID != forged.Spec.SpiffeID || got.Labels[labels.OwnerNamespace] != "other" || got.Labels[labels.OwnerName] != "someone-else" {
		t.Fatalf("the pass adopted and rewrote an object whose owner labels name other/someone-else: now spiffeID %q, owner %s/%s (pass error %v)",
			got.Spec.SpiffeID, got.Labels[labels.OwnerNamespace], got.Labels[labels.OwnerName], err)
	}
	if err == nil {
		t.Fatalf("the pass succeeded although its output name is held by a foreign object")
	}
}

// TestAdversarialWithdrawalSparesAnOutputNamingAnotherOwner: the binding fails
// (invalid variant) and withdraws its outputs. An object under another name
// whose owner-uid/owner-kind labels name the binding but whose
// owner-namespace/owner-name name another binding is not the binding's by
// an exact parse of its owner labels, so it must survive.
func TestAdversarialWithdrawalSparesAnOutputNamingAnotherOwner(t *testing.T) {
	b := attackBinding("team", "b", "prod", "uid-team-b")
	b.Spec.IdentityBoundary.Variant = "bad variant"
	forged := forgedEntry("some-other-entry", b)
	c := attackClient(t, b, attackDeployment("team"), forged)
	h := attackHandler(t, c)
	err := passAsController(t, h, c, b)
	if err == nil {
		t.Fatal("an invalid variant passed")
	}
	gerr := c.Get(context.Background(), client.ObjectKeyFromObject(forged), &spiffev1alpha1.SpiffeEntry{})
	if apierrors.IsNotFound(gerr) {
		t.Fatalf("the withdrawal of team/b deleted %s, whose owner labels name other/someone-else (only its owner-uid/kind match): pass error %v", forged.Name, err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
}

// TestAdversarialRecreatedBindingDoesNotInheritTheOldOutput: a namespace (or
// just a binding) is deleted without its Delete pass (finalizer stripped
// by the tenant) and created again under the same names, with a new UID
// and another spec. The old binding's output, under the same output name,
// is not the new binding's: the new binding's pass must neither rewrite
// nor delete it (it is the orphan sweep's), and must not report Ready
// while it is there.
func TestAdversarialRecreatedBindingDoesNotInheritTheOldOutput(t *testing.T) {
	old := attackBinding("team", "b", "prod", "uid-old")
	c0 := attackClient(t, old, attackDeployment("team"))
	h0 := attackHandler(t, c0)
	if err := passAsController(t, h0, c0, old); err != nil {
		t.Fatal(err)
	}
	oldEntry := &spiffev1alpha1.SpiffeEntry{}
	if err := c0.Get(context.Background(), client.ObjectKey{Name: output.Name("team", "b")}, oldEntry); err != nil {
		t.Fatal(err)
	}
	oldEntry.ResourceVersion = ""
	fresh := attackBinding("team", "b", "prod", "uid-new")
	fresh.Spec.IdentityBoundary.Variant = "v2"
	fresh.Spec.SPIFFEIDPathTemplate = "ns/{namespace}/sa/{serviceAccount}/fresh"
	c := attackClient(t, fresh, attackDeployment("team"), oldEntry)
	h := attackHandler(t, c)
	err := passAsController(t, h, c, fresh)
	got := &spiffev1alpha1.SpiffeEntry{}
	if gerr := c.Get(context.Background(), client.ObjectKeyFromObject(oldEntry), got); gerr != nil {
		t.Fatalf("the old binding's output was deleted by the new binding's pass: %v", gerr)
	}
	if got.Labels[labels.OwnerUID] != "uid-old" || got.Spec.SpiffeID != oldEntry.Spec.SpiffeID {
		t.Fatalf("the new binding adopted the old output: owner %s, ID %s", got.Labels[labels.OwnerUID], got.Spec.SpiffeID)
	}
	if err == nil || fresh.Status.SPIFFEID != "" {
		t.Fatalf("the new binding reports Ready (%q) while the old output holds its name: %v", fresh.Status.SPIFFEID, err)
	}
}

// TestAdversarialAnotherEnvironmentDoesNotHideAConflict: A (environment prod)
// is Ready; B of the same namespace, service account and variant but
// another pool is labelled with an environment nobody runs. Both report
// Conflict and A's output is withdrawn; B writes nothing. Then B switches
// to A's exact SPIFFE ID with another variant (DuplicateSPIFFEID): again
// both conflict.
func TestAdversarialAnotherEnvironmentDoesNotHideAConflict(t *testing.T) {
	a := attackBinding("team", "a", "prod", "uid-a")
	b := attackBinding("team", "b", "hidden", "uid-b")
	b.Spec.PoolRef.Name = "llm2"
	d2 := attackDeployment("team")
	d2.Name = "llm2"
	c := attackClient(t, a, attackDeployment("team"), d2)
	h := attackHandler(t, c)
	if err := passAsController(t, h, c, a); err != nil {
		t.Fatal(err)
	}
	if a.Status.SPIFFEID == "" {
		t.Fatal("A is not Ready before the attack")
	}
	if err := c.Create(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	for round, mutate := range []func(){
		func() {},
		func() {
			cur := &v1alpha1.IdentityBinding{}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(b), cur); err != nil {
				t.Fatal(err)
			}
			cur.Spec.IdentityBoundary.Variant = "v9"
			cur.Spec.SPIFFEIDPathTemplate = "ns/{namespace}/sa/{serviceAccount}/pool/llm/variant/v1"
			if err := c.Update(context.Background(), cur); err != nil {
				t.Fatal(err)
			}
			b.Spec = cur.Spec
			b.ResourceVersion = cur.ResourceVersion
		},
	} {
		mutate()
		errB := passAsController(t, h, c, b)
		errA := passAsController(t, h, c, a)
		for _, x := range []*v1alpha1.IdentityBinding{a, b} {
			if x.Status.SPIFFEID != "" || len(x.Status.Conflicts) == 0 {
				t.Fatalf("round %d: %s/%s (env %s) is not in conflict: ID %q conflicts %v (errors %v / %v)", round, x.Namespace, x.Name,
					x.Labels[labels.Environment], x.Status.SPIFFEID, x.Status.Conflicts, errA, errB)
			}
		}
		var l spiffev1alpha1.SpiffeEntryList
		if err := c.List(context.Background(), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 0 {
			t.Fatalf("round %d: outputs left while both conflict: %v", round, l.Items[0].Name)
		}
	}
}
