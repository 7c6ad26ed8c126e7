package operator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

var _ = Describe("SpiffeRegistration", func() {
	It("registers a selected Deployment with the default template and an owned entry ID", func() {
		namespace("create-a", map[string]string{"test": "create"})
		deployment("create-a", "web", "checkout", nil)
		p := policyFor("create", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())

		Eventually(paths(parentOf("create"))).Should(Equal([]string{"/ns/create-a/sa/checkout"}))
		e := entryAt(parentOf("create"), "/ns/create-a/sa/checkout")
		Expect(selectorsOf(e)).To(Equal([]string{"k8s:ns:create-a", "k8s:sa:checkout"}))
		Expect(e.X509SvidTtl).To(Equal(int32(3600)))
		Expect(e.Id).To(HavePrefix(op.EntryIDPrefix + entries.OwnerTag(p.UID) + "."))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Expect(p.Status.WorkloadsSelected).To(Equal(int32(1)))
		Expect(p.Status.EntriesRegistered).To(Equal(int32(1)))
		Expect(p.Status.LastSyncTime).NotTo(BeNil())
		Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
	})

	It("keeps a shared service account's entry until no selected workload needs it", func() {
		namespace("shared-a", map[string]string{"test": "shared"})
		d1 := deployment("shared-a", "one", "shop", nil)
		d2 := deployment("shared-a", "two", "shop", nil)
		Expect(k8s.Create(ctx, policyFor("shared", nil))).To(Succeed())
		Eventually(paths(parentOf("shared"))).Should(Equal([]string{"/ns/shared-a/sa/shop"}))
		id := entryAt(parentOf("shared"), "/ns/shared-a/sa/shop").Id

		Expect(k8s.Delete(ctx, d1)).To(Succeed())
		Consistently(func() string {
			if e := entryAt(parentOf("shared"), "/ns/shared-a/sa/shop"); e != nil {
				return e.Id
			}
			return ""
		}).Should(Equal(id))

		Expect(k8s.Delete(ctx, d2)).To(Succeed())
		Eventually(paths(parentOf("shared"))).Should(BeEmpty())
	})

	It("deletes the entries of a namespace whose label is removed", func() {
		ns := namespace("nslabel-a", map[string]string{"test": "nslabel"})
		deployment("nslabel-a", "web", "web", nil)
		Expect(k8s.Create(ctx, policyFor("nslabel", nil))).To(Succeed())
		Eventually(paths(parentOf("nslabel"))).Should(HaveLen(1))

		patch := client.MergeFrom(ns.DeepCopy())
		ns.Labels = nil
		Expect(k8s.Patch(ctx, ns, patch)).To(Succeed())
		Eventually(paths(parentOf("nslabel"))).Should(BeEmpty())
	})

	It("follows a changed workload selector, creating new entries before deleting old ones", func() {
		namespace("selchg-a", map[string]string{"test": "selchg"})
		deployment("selchg-a", "blue", "blue", map[string]string{"app": "blue", "color": "blue"})
		deployment("selchg-a", "green", "green", map[string]string{"app": "green", "color": "green"})
		p := policyFor("selchg", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"color": "blue"}}
		})
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("selchg"))).Should(Equal([]string{"/ns/selchg-a/sa/blue"}))

		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.WorkloadSelector.MatchLabels["color"] = "green"
		})).To(Succeed())
		Eventually(paths(parentOf("selchg"))).Should(Equal([]string{"/ns/selchg-a/sa/green"}))
	})

	It("deletes exactly its entries when the policy is deleted, leaving foreign entries alone", func() {
		namespace("del-a", map[string]string{"test": "del"})
		deployment("del-a", "web", "web", nil)
		_, err := srv.CLI(ctx, "entry", "create", "-parentID", parentOf("del"),
			"-spiffeID", "spiffe://example.org/hand/made", "-selector", "unix:uid:1000")
		Expect(err).NotTo(HaveOccurred())
		p := policyFor("del", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("del"))).Should(Equal([]string{"/hand/made", "/ns/del-a/sa/web"}))

		Expect(k8s.Delete(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("del"))).Should(Equal([]string{"/hand/made"}))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), p))
		}).Should(BeTrue())
	})

	It("updates a changed TTL in place, keeping the entry ID", func() {
		namespace("ttl-a", map[string]string{"test": "ttl"})
		deployment("ttl-a", "web", "web", nil)
		p := policyFor("ttl", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("ttl"))).Should(HaveLen(1))
		id := entriesUnder(parentOf("ttl"))[0].Id

		Expect(testenv.Edit(ctx, k8s, p, func(p *v1alpha1.SpiffeRegistration) {
			p.Spec.X509SVIDTTL = &metav1.Duration{Duration: 10 * time.Minute}
			p.Spec.Hint = "web"
		})).To(Succeed())
		Eventually(func() int32 { return entriesUnder(parentOf("ttl"))[0].X509SvidTtl }).Should(Equal(int32(600)))
		got := entriesUnder(parentOf("ttl"))
		Expect(got).To(HaveLen(1))
		Expect(got[0].Id).To(Equal(id))
		Expect(got[0].Hint).To(Equal("web"))
	})

	It("recreates an entry deleted by hand and restores one edited by hand", func() {
		namespace("repair-a", map[string]string{"test": "repair"})
		deployment("repair-a", "one", "one", nil)
		deployment("repair-a", "two", "two", nil)
		Expect(k8s.Create(ctx, policyFor("repair", nil))).To(Succeed())
		Eventually(paths(parentOf("repair"))).Should(HaveLen(2))
		one := entryAt(parentOf("repair"), "/ns/repair-a/sa/one")
		two := entryAt(parentOf("repair"), "/ns/repair-a/sa/two")

		_, err := srv.CLI(ctx, "entry", "delete", "-entryID", one.Id)
		Expect(err).NotTo(HaveOccurred())
		two.X509SvidTtl = 5
		res, err := spireAPI.Update(ctx, []*types.Entry{two}, &types.EntryMask{X509SvidTtl: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(res[0].Code.String()).To(Equal("OK"))

		Eventually(func() bool { return entryAt(parentOf("repair"), "/ns/repair-a/sa/one") != nil }, 4*resync).Should(BeTrue())
		Eventually(func() int32 { return entryAt(parentOf("repair"), "/ns/repair-a/sa/two").X509SvidTtl }, 4*resync).Should(Equal(int32(3600)))
		Expect(entryAt(parentOf("repair"), "/ns/repair-a/sa/one").Id).To(Equal(one.Id))
	})

	It("lets the oldest of two policies rendering the same entry win, and hands over when it goes", func() {
		namespace("dup-a", map[string]string{"test": "dup"})
		deployment("dup-a", "web", "web", nil)
		sameParent := func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.ParentID = parentOf("dup")
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "dup"}}
		}
		first := policyFor("dup-first", sameParent)
		Expect(k8s.Create(ctx, first)).To(Succeed())
		Eventually(policyReady(first)).Should(Equal("True/Ready"))
		second := policyFor("dup-second", sameParent)
		Expect(k8s.Create(ctx, second)).To(Succeed())
		// Creation times have a one-second resolution; ties go to the lower UID.
		winner, loser := first, second
		if second.CreationTimestamp.Equal(&first.CreationTimestamp) && second.UID < first.UID {
			winner, loser = second, first
		}
		Eventually(func() int32 { _ = policyReady(loser)(); return loser.Status.EntriesMasked }).Should(Equal(int32(1)))
		Eventually(func() int32 { _ = policyReady(winner)(); return winner.Status.EntriesRegistered }).Should(Equal(int32(1)))
		Expect(entriesUnder(parentOf("dup"))).To(HaveLen(1))
		Expect(entriesUnder(parentOf("dup"))[0].Id).To(ContainSubstring(entries.OwnerTag(winner.UID)))

		Expect(k8s.Delete(ctx, winner)).To(Succeed())
		Eventually(func() string {
			l := entriesUnder(parentOf("dup"))
			if len(l) != 1 {
				return ""
			}
			return l[0].Id
		}).Should(ContainSubstring(entries.OwnerTag(loser.UID)))
		Eventually(func() int32 { _ = policyReady(loser)(); return loser.Status.EntriesRegistered }).Should(Equal(int32(1)))
		Expect(loser.Status.EntriesMasked).To(BeZero())
	})

	It("adds the workload's pod-label selectors when the template names the workload", func() {
		namespace("byname-a", map[string]string{"test": "byname"})
		deployment("byname-a", "api", "shared", map[string]string{"app": "api", "tier": "backend"})
		deployment("byname-a", "ui", "shared", map[string]string{"app": "ui"})
		Expect(k8s.Create(ctx, policyFor("byname", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/{kind}/{name}"
			s.DNSNameTemplates = []string{"{name}.{namespace}.svc"}
		}))).To(Succeed())
		Eventually(paths(parentOf("byname"))).Should(Equal([]string{"/ns/byname-a/Deployment/api", "/ns/byname-a/Deployment/ui"}))
		api := entryAt(parentOf("byname"), "/ns/byname-a/Deployment/api")
		Expect(selectorsOf(api)).To(Equal([]string{"k8s:ns:byname-a", "k8s:pod-label:app:api", "k8s:pod-label:tier:backend", "k8s:sa:shared"}))
		Expect(api.DnsNames).To(Equal([]string{"api.byname-a.svc"}))
	})

	It("selects StatefulSets and DaemonSets when asked to", func() {
		namespace("kinds-a", map[string]string{"test": "kinds"})
		deployment("kinds-a", "d", "deploy-sa", nil)
		statefulSet("kinds-a", "s", "sts-sa")
		daemonSet("kinds-a", "ds", "ds-sa")
		Expect(k8s.Create(ctx, policyFor("kinds", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.WorkloadKinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindStatefulSet, v1alpha1.WorkloadKindDaemonSet}
		}))).To(Succeed())
		Eventually(paths(parentOf("kinds"))).Should(Equal([]string{"/ns/kinds-a/sa/ds-sa", "/ns/kinds-a/sa/sts-sa"}))
	})

	It("reports a template that renders an invalid SPIFFE ID, naming the field, and registers the rest", func() {
		namespace("render-a", map[string]string{"test": "render"})
		deployment("render-a", "labelled", "a", map[string]string{"app": "labelled", "team": "pay"})
		deployment("render-a", "unlabelled", "b", nil)
		p := policyFor("render", func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "team/{label:team}/{serviceAccount}" })
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("False/InvalidSpiffeIDTemplate"))
		Expect(meta.FindStatusCondition(p.Status.Conditions, "Ready").Message).To(ContainSubstring("spec.spiffeIDTemplate"))
		Expect(p.Status.Failures).To(HaveLen(1))
		Expect(p.Status.Failures[0].Object).To(Equal("Deployment render-a/unlabelled"))
		Expect(paths(parentOf("render"))()).To(Equal([]string{"/team/pay/a"}))
	})

	It("refuses bad input at admission", func() {
		bad := map[string]func(*v1alpha1.SpiffeRegistrationSpec){
			"trust domain":         func(s *v1alpha1.SpiffeRegistrationSpec) { s.TrustDomain = "Not A Domain" },
			"parent ID":            func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "https://example.org/agent" },
			"parent outside td":    func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "spiffe://other.org/agent" },
			"unknown variable":     func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "ns/{pod}" },
			"leading slash":        func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "/ns/{namespace}" },
			"workload kind":        func(s *v1alpha1.SpiffeRegistrationSpec) { s.WorkloadKinds = []v1alpha1.WorkloadKind{"Pod"} },
			"negative ttl":         func(s *v1alpha1.SpiffeRegistrationSpec) { s.X509SVIDTTL = &metav1.Duration{Duration: -time.Minute} },
			"federates with":       func(s *v1alpha1.SpiffeRegistrationSpec) { s.FederatesWith = []v1alpha1.TrustDomainName{"spiffe://x"} },
			"dns template charset": func(s *v1alpha1.SpiffeRegistrationSpec) { s.DNSNameTemplates = []string{"a b"} },
		}
		for name, mut := range bad {
			p := policyFor("bad-"+strings.ReplaceAll(name, " ", "-"), mut)
			err := k8s.Create(ctx, p)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		}
		badEntries := map[string]func(*v1alpha1.SpiffeEntrySpec){
			"selector":           func(s *v1alpha1.SpiffeEntrySpec) { s.Selectors = []string{"no-colon"} },
			"no selectors":       func(s *v1alpha1.SpiffeEntrySpec) { s.Selectors = nil },
			"spiffe ID":          func(s *v1alpha1.SpiffeEntrySpec) { s.SpiffeID = "spiffe://example.org" },
			"mixed trust domain": func(s *v1alpha1.SpiffeEntrySpec) { s.SpiffeID = "spiffe://other.org/x" },
		}
		for name, mut := range badEntries {
			e := spiffeEntry("bad-entry-"+strings.ReplaceAll(name, " ", "-"), mut)
			err := k8s.Create(ctx, e)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", name, err)
		}
	})

	It("reports SpireUnavailable while SPIRE is down and converges after a restart without duplicates or leaks", func() {
		namespace("outage-a", map[string]string{"test": "outage"})
		deployment("outage-a", "before", "before", nil)
		p := policyFor("outage", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		Eventually(paths(parentOf("outage"))).Should(HaveLen(1))

		Expect(srv.Stop()).To(Succeed())
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				Expect(srv.Restart()).To(Succeed())
			}
		})
		for _, n := range []string{"x1", "x2", "x3"} {
			deployment("outage-a", n, n, nil)
		}
		Eventually(policyReady(p)).Should(Equal("False/SpireUnavailable"))

		Expect(srv.Restart()).To(Succeed())
		restarted = true
		Eventually(paths(parentOf("outage"))).Should(Equal([]string{
			"/ns/outage-a/sa/before", "/ns/outage-a/sa/x1", "/ns/outage-a/sa/x2", "/ns/outage-a/sa/x3"}))
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Consistently(func() int { return len(entriesUnder(parentOf("outage"))) }).Should(Equal(4))
	})

	It("converges without duplicates or leaks when SPIRE is killed in the middle of a pass's writes", func() {
		const n = 400
		namespace("midpass-a", map[string]string{"test": "midpass"})
		for i := range n {
			deployment("midpass-a", fmt.Sprintf("w-%d", i), fmt.Sprintf("w-%d", i), nil)
		}
		p := policyFor("midpass", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())

		// Kill SPIRE as soon as the first of the pass's batches has landed.
		var before int
		Eventually(func() int {
			before = len(entriesUnder(parentOf("midpass")))
			return before
		}).WithPolling(2 * time.Millisecond).Should(BeNumerically(">", 0))
		Expect(srv.Kill()).To(Succeed())
		DeferCleanup(func() {
			if !srv.Running() {
				Expect(srv.Restart()).To(Succeed())
			}
		})
		Expect(before).To(BeNumerically("<", n), "the pass had finished before SPIRE was killed")
		Eventually(policyReady(p)).Should(Equal("False/SpireUnavailable"))

		Expect(srv.Restart()).To(Succeed())
		Eventually(policyReady(p)).Should(Equal("True/Ready"))
		Expect(p.Status.EntriesRegistered).To(Equal(int32(n)))
		Consistently(func() error {
			list := entriesUnder(parentOf("midpass"))
			if len(list) != n {
				return fmt.Errorf("%d entries, want %d", len(list), n)
			}
			seen := map[string]bool{}
			for _, e := range list {
				if seen[e.SpiffeId.Path] {
					return fmt.Errorf("duplicate entry for %s", e.SpiffeId.Path)
				}
				seen[e.SpiffeId.Path] = true
				if !strings.HasPrefix(e.Id, op.EntryIDPrefix+entries.OwnerTag(p.UID)+".") {
					return fmt.Errorf("entry %s is not the policy's", e.Id)
				}
			}
			return nil
		}).Should(Succeed())
	})

	It("deletes the entries under a parent that was changed while the operator was down", func() {
		namespace("reparent-a", map[string]string{"test": "reparent"})
		deployment("reparent-a", "web", "web", nil)
		p := policyFor("reparent", nil)
		Expect(k8s.Create(ctx, p)).To(Succeed())
		e := spiffeEntry("reparent-vm", func(s *v1alpha1.SpiffeEntrySpec) { s.ParentID = parentOf("reparent-e1") })
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(paths(parentOf("reparent"))).Should(Equal([]string{"/ns/reparent-a/sa/web"}))
		Eventually(paths(parentOf("reparent-e1"))).Should(Equal([]string{"/vm/reparent-vm"}))
		Eventually(recordedParents(p)).Should(Equal([]string{parentOf("reparent")}))
		Eventually(recordedParents(e)).Should(Equal([]string{parentOf("reparent-e1")}))

		whileOperatorDown(func() {
			setParent(p, parentOf("reparent-2"))
			setParent(e, parentOf("reparent-e2"))
		})
		Eventually(paths(parentOf("reparent-2"))).Should(Equal([]string{"/ns/reparent-a/sa/web"}))
		Eventually(paths(parentOf("reparent-e2"))).Should(Equal([]string{"/vm/reparent-vm"}))
		Eventually(paths(parentOf("reparent"))).Should(BeEmpty())
		Eventually(paths(parentOf("reparent-e1"))).Should(BeEmpty())
		Eventually(recordedParents(p)).Should(Equal([]string{parentOf("reparent-2")}))
		Eventually(recordedParents(e)).Should(Equal([]string{parentOf("reparent-e2")}))

		// Changed again and deleted while down: the recorded parent is
		// still read, so nothing is left behind.
		whileOperatorDown(func() {
			setParent(p, parentOf("reparent-3"))
			setParent(e, parentOf("reparent-e3"))
			Expect(k8s.Delete(ctx, p)).To(Succeed())
			Expect(k8s.Delete(ctx, e)).To(Succeed())
		})
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)) }).Should(BeTrue())
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(e), e)) }).Should(BeTrue())
		for _, parent := range []string{"reparent", "reparent-2", "reparent-3", "reparent-e1", "reparent-e2", "reparent-e3"} {
			Expect(paths(parentOf(parent))()).To(BeEmpty(), parent)
		}
	})
})

func spiffeEntry(name string, mut func(*v1alpha1.SpiffeEntrySpec)) *v1alpha1.SpiffeEntry {
	e := &v1alpha1.SpiffeEntry{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SpiffeEntrySpec{
			SpiffeID:  "spiffe://example.org/vm/" + name,
			ParentID:  parentOf("entries"),
			Selectors: []string{"unix:uid:1001"},
		},
	}
	if mut != nil {
		mut(&e.Spec)
	}
	return e
}

var _ = Describe("SpiffeEntry", func() {
	It("registers an explicit entry and reports its entry ID", func() {
		e := spiffeEntry("db", func(s *v1alpha1.SpiffeEntrySpec) { s.DNSNames = []string{"db.example.org"} })
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(entryReady(e)).Should(Equal("True/Ready"))
		Expect(e.Status.EntryID).To(HavePrefix(op.EntryIDPrefix))
		got := entryAt(parentOf("entries"), "/vm/db")
		Expect(got).NotTo(BeNil())
		Expect(got.Id).To(Equal(e.Status.EntryID))
		Expect(got.DnsNames).To(Equal([]string{"db.example.org"}))

		Expect(k8s.Delete(ctx, e)).To(Succeed())
		Eventually(func() *types.Entry { return entryAt(parentOf("entries"), "/vm/db") }).Should(BeNil())
	})

	It("reports an entry SPIRE rejects as a named failure", func() {
		e := spiffeEntry("rejected", func(s *v1alpha1.SpiffeEntrySpec) { s.DNSNames = []string{"-bad-.example"} })
		Expect(k8s.Create(ctx, e)).To(Succeed())
		Eventually(entryReady(e)).Should(Equal("False/EntryRejected"))
		Expect(meta.FindStatusCondition(e.Status.Conditions, "Ready").Message).To(ContainSubstring("InvalidArgument"))
	})
})

var _ = Describe("SPIRE over mTLS", func() {
	It("reads and writes entries with a minted admin X509-SVID, authorizing the server's SPIFFE ID", func() {
		dir, err := srv.MintX509SVID(ctx, adminID)
		Expect(err).NotTo(HaveOccurred())
		opts := spireconn.Options{
			Address: srv.Address, ServerID: srv.ServerID,
			SVIDCertFile: filepath.Join(dir, "svid.pem"), SVIDKeyFile: filepath.Join(dir, "key.pem"), BundleFile: filepath.Join(dir, "bundle.pem"),
		}
		conn, closer, err := spireconn.Dial(ctx, opts)
		Expect(err).NotTo(HaveOccurred())
		defer closer.Close()
		c := spire.NewClient(conn, spire.Options{})
		e := entries.Entry{
			SpiffeID:  spiffeid.RequireFromString("spiffe://example.org/mtls/check"),
			ParentID:  spiffeid.RequireFromString(parentOf("mtls")),
			Selectors: []entries.Selector{{Type: "unix", Value: "uid:7"}},
		}
		res, err := c.Create(ctx, []*types.Entry{e.Proto("trustplane.mtls.check")})
		Expect(err).NotTo(HaveOccurred())
		Expect(res[0].Code.String()).To(Equal("OK"))
		list, err := c.ListByParent(ctx, e.ParentID)
		Expect(err).NotTo(HaveOccurred())
		Expect(list).To(HaveLen(1))

		wrong := opts
		wrong.ServerID = "spiffe://example.org/not/the/server"
		conn2, closer2, err := spireconn.Dial(ctx, wrong)
		Expect(err).NotTo(HaveOccurred())
		defer closer2.Close()
		tctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = spire.NewClient(conn2, spire.Options{}).ListByParent(tctx, e.ParentID)
		Expect(err).To(HaveOccurred())
	})
})
