package spifferegistration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestATenantsManyMatchLabelsFailTheirWorkloadAloneOnARealSPIRE: a
// per-workload template ({name}) makes the entry carry the workload's
// spec.selector.matchLabels as k8s:pod-label selectors, one per label, and
// nothing bounded how many. A tenant who may create Deployments in one
// selected namespace gives one 600 matchLabels (a 20 KB object). SPIRE
// looks up a "similar entry" before each create with one INTERSECT term
// per selector; SQLite allows 500 terms (MySQL joins 61 tables), so SPIRE
// answers Internal, which the operator takes for SPIRE being down: the
// shared policy's pass fails (retried with backoff, for good), the tenant's
// workload is never named in status.failures, and the policy's status says
// SPIRE is failing for every namespace.
//
// Safe behaviour: the operator refuses, before SPIRE, an entry with more
// selectors than an entry may have, failing that workload alone with a
// reason that names it; the other namespace's entry is registered.
func TestATenantsManyMatchLabelsFailTheirWorkloadAloneOnARealSPIRE(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := testenv.StartSpire(testenv.SpireOptions{LogLevel: "INFO"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Cleanup() })
	conn, closer, err := spireconn.Dial(ctx, spireconn.Options{SocketPath: srv.SocketPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closer.Close() })
	api := spire.NewClient(conn, spire.Options{})

	match := map[string]string{}
	for i := range 600 {
		match[fmt.Sprintf("k%03d", i)] = "v"
	}
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
		ns("tenant", map[string]string{"spiffe": "on"}), ns("victim", map[string]string{"spiffe": "on"}),
		deploy("tenant", "wide", "web", match),
		deploy("victim", "api", "api", map[string]string{"app": "api"}),
	).Build()
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	h := &Handler{Reader: c, Syncer: s, TrustDomain: "example.org"}
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}/{name}"
	})

	// The pass reports the failing workload as any other (Blocked, with
	// the workload's reason, not retried until something changes), rather
	// than as SPIRE being unavailable and retried for good.
	passErr := h.CreateOrUpdate(ctx, p)
	if !ctrlerrors.IsBlocked(passErr) || ctrlerrors.Reason(passErr, "") != ReasonTooManySelectors || !strings.Contains(passErr.Error(), "tenant/wide") {
		t.Errorf("want the pass blocked with %s naming the tenant's workload, got reason %q: %v",
			ReasonTooManySelectors, ctrlerrors.Reason(passErr, ""), truncate(fmt.Sprint(passErr)))
	}
	all, err := api.ListAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim bool
	for _, e := range all {
		if e.SpiffeId.Path == "/ns/victim/sa/api/api" {
			victim = true
		}
	}
	if !victim {
		t.Errorf("the victim namespace's entry is not registered (%d entries)", len(all))
	}
	var named bool
	for _, f := range p.Status.Failures {
		if strings.Contains(f.Object, "tenant/wide") {
			named = true
			if f.Reason != ReasonTooManySelectors || !strings.Contains(f.Message, "602 selectors") {
				t.Errorf("the tenant's workload fails as %s: %s; want %s naming its 602 selectors", f.Reason, f.Message, ReasonTooManySelectors)
			}
		}
	}
	if !named {
		t.Errorf("the tenant's workload is not named in status.failures: %+v", p.Status.Failures)
	}
}

func truncate(s string) string {
	if len(s) > 400 {
		return s[:400] + "..."
	}
	return s
}
