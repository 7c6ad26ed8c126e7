package spiffeentry

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

func newEntry(name string, age time.Duration) *v1alpha1.SpiffeEntry {
	return &v1alpha1.SpiffeEntry{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("0000000" + name[:1] + "-0000-0000-0000-000000000000"),
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age))},
		Spec: v1alpha1.SpiffeEntrySpec{
			SpiffeID:  "spiffe://example.org/vm/db",
			ParentID:  "spiffe://example.org/spire/agent/x509pop/abc",
			Selectors: []string{"x509pop:subject:cn:db"},
		},
	}
}

func newHandler() (*Handler, *spirefake.EntryAPI) {
	api := spirefake.New()
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	return &Handler{Syncer: s, TrustDomain: "example.org"}, api
}

func TestEntryIsRegisteredWithItsID(t *testing.T) {
	h, api := newHandler()
	obj := newEntry("a", 0)
	if err := h.CreateOrUpdate(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	if obj.Status.EntryID == "" || api.Get(obj.Status.EntryID) == nil {
		t.Errorf("entry ID %q not in SPIRE", obj.Status.EntryID)
	}
}

func TestYoungerDuplicateIsMaskedAndTakesOver(t *testing.T) {
	h, api := newHandler()
	old, young := newEntry("old", time.Hour), newEntry("young", 0)
	ctx := context.Background()
	if err := h.CreateOrUpdate(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := h.CreateOrUpdate(ctx, young); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(young.Status.Conditions, TypeMasked); c == nil || c.Reason != ReasonMaskedByObject || young.Status.EntryID != "" {
		t.Fatalf("younger not masked: %+v", young.Status)
	}
	if err := h.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := h.CreateOrUpdate(ctx, young); err != nil {
		t.Fatal(err)
	}
	if young.Status.EntryID == "" || api.Get(young.Status.EntryID) == nil || meta.FindStatusCondition(young.Status.Conditions, TypeMasked) != nil {
		t.Errorf("younger did not take over: %+v", young.Status)
	}
}

func TestBadEntriesAreRefusedNamingTheField(t *testing.T) {
	cases := map[string]struct {
		mut    func(*v1alpha1.SpiffeEntrySpec)
		reason string
	}{
		"spiffe ID":     {func(s *v1alpha1.SpiffeEntrySpec) { s.SpiffeID = "spiffe://example.org" }, ReasonInvalidSpiffeID},
		"other domain":  {func(s *v1alpha1.SpiffeEntrySpec) { s.SpiffeID = "spiffe://other.org/x" }, ReasonInvalidSpiffeID},
		"parent ID":     {func(s *v1alpha1.SpiffeEntrySpec) { s.ParentID = "not-an-id" }, ReasonInvalidParentID},
		"selector":      {func(s *v1alpha1.SpiffeEntrySpec) { s.Selectors = []string{"novalue"} }, ReasonInvalidSelector},
		"no selector":   {func(s *v1alpha1.SpiffeEntrySpec) { s.Selectors = nil }, ReasonInvalidSelector},
		"federatesWith": {func(s *v1alpha1.SpiffeEntrySpec) { s.FederatesWith = []v1alpha1.TrustDomainName{"BAD TD"} }, ReasonInvalidFederatesWith},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h, api := newHandler()
			obj := newEntry("a", 0)
			tc.mut(&obj.Spec)
			err := h.CreateOrUpdate(context.Background(), obj)
			if !ctrlerrors.IsBlocked(err) || ctrlerrors.Reason(err, "") != tc.reason {
				t.Errorf("err = %v, reason %s, want %s", err, ctrlerrors.Reason(err, ""), tc.reason)
			}
			if len(api.All()) != 0 {
				t.Error("entry written for a bad spec")
			}
		})
	}
}

func TestAnEntryIDSpireDidNotKeepIsReportedByName(t *testing.T) {
	h, api := newHandler()
	api.IgnoreIDs = true
	err := h.CreateOrUpdate(context.Background(), newEntry("a", 0))
	if !ctrlerrors.IsBlocked(err) || ctrlerrors.Reason(err, "") != spifferegistration.ReasonEntryIDNotKept {
		t.Errorf("err = %v, reason %s", err, ctrlerrors.Reason(err, ""))
	}
	if len(api.All()) != 0 {
		t.Errorf("left %v behind", api.All())
	}
}

func TestAForeignEntryMasksWithItsOwnReason(t *testing.T) {
	h, api := newHandler()
	obj := newEntry("a", 0)
	e, fe := build(&obj.Spec, "example.org")
	if fe != nil {
		t.Fatal(fe)
	}
	api.Put(e.Proto("hand-made"))
	if err := h.CreateOrUpdate(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, TypeMasked); c == nil || c.Reason != ReasonMaskedByForeignEntry {
		t.Errorf("conditions = %+v", obj.Status.Conditions)
	}
}
