package entrysync

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAHandOverHeldBackByAFailedCreateCallIsNotMadeByTheNotifiedClaimant:
// the setup of TestAHandOverIsNotMadeInAPassWhoseCreateCallFailed (two
// policies want b/ops; the older holds it, the younger waits masked; the
// older drops it in a pass whose BatchCreateEntry call SPIRE fails as a
// whole). b1e7cb7 holds the older's entry back and hands nothing over.
// But the older's pass already moved its claims (claims.set, before the
// plan ran) and, in finish, asked for a pass of the younger, the key's new
// winner. That pass, the very next one the controller runs, takes the
// older's entry over: delete, then create the younger's entry in a
// BatchCreateEntry call that SPIRE fails as the older's did, then put the
// older's entry back with a third create, which fails too. b/ops has no
// entry at all until SPIRE takes creates again: the hand-over the failed
// pass held back is made one pass later, as break-before-make, through
// the notification the failed pass itself sent. Pre-9c20d03 code had it
// too (claims and the notification come before execute there as well).
func TestAHandOverHeldBackByAFailedCreateCallIsNotMadeByTheNotifiedClaimant(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.PermissionDenied} {
		t.Run(code.String(), func(t *testing.T) {
			ctx := context.Background()
			api := &createCallFails{EntryAPI: fake.New()}
			s, _, n := newSyncer(api)
			older, younger := owner("older", time.Hour), owner("younger", 0)
			ops := saEntry("b", "ops")
			if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{ops}), nil); err != nil {
				t.Fatal(err)
			}
			out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{ops}), nil)
			if err != nil || len(out.Masked) != 1 {
				t.Fatalf("younger's pass: %v, %+v", err, out)
			}
			api.code = code
			if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{saEntry("a", "web")}), nil); err == nil {
				t.Fatal("the failed create call reported no error")
			}
			if !holdsPath(api.EntryAPI, "/ns/b/sa/ops") {
				t.Fatalf("setup: b1e7cb7 should hold b/ops back (writes %v)", api.Writes())
			}
			if !n.has(younger) {
				t.Fatalf("setup: the failed pass did not ask for the younger policy's pass")
			}
			// The pass the syncer asked for; SPIRE still fails creates.
			_, yerr := s.Sync(ctx, younger, ptrs([]entries.Entry{ops}), nil)
			if !holdsPath(api.EntryAPI, "/ns/b/sa/ops") {
				t.Errorf("SPIRE fails every BatchCreateEntry call (%s); the older policy's failed pass held b/ops back and "+
					"handed nothing over, but it had already made the younger policy the key's winner and asked for its "+
					"pass, and that pass (%v) deleted the older's entry to take it over, its create and the put-back "+
					"failing: b/ops, which the younger policy still wants, has no entry at all until creates go "+
					"through (writes %v)", code, yerr, api.Writes())
			}
		})
	}
}

// TestATakeoverInAPassWhoseCreateCallFailsLosesNoEntry: an older policy
// comes to want an entry a younger one holds (same fields: no probe), and
// SPIRE fails BatchCreateEntry calls as a whole (an authorization policy
// or proxy that denies or cuts creates, not deletes). b1e7cb7 says a
// pass in which SPIRE failed a call as a whole deletes nothing; the docs
// say a takeover whose create fails puts the holder's entry back "in the
// same pass: the gap is then three SPIRE round trips, not until a pass
// succeeds". Here the takeover's delete goes first, the create call
// fails, and the put-back is one more create call, which fails the same
// way: the pods of the shared entry have no entry until creates go
// through. Pre-9c20d03 code had it too.
func TestATakeoverInAPassWhoseCreateCallFailsLosesNoEntry(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.PermissionDenied} {
		t.Run(code.String(), func(t *testing.T) {
			api := &createCallFails{EntryAPI: fake.New()}
			e := named("/shared", "a", "sa", "app", "web")
			s, older, held := sharedByYounger(t, api.EntryAPI, e)
			s.api = api
			api.code = code
			_, err := s.Sync(context.Background(), older, ptrs([]entries.Entry{e}), nil)
			if err == nil {
				t.Fatal("the failed create call reported no error")
			}
			if !holdsPath(api.EntryAPI, "/shared") {
				t.Errorf("SPIRE failed the BatchCreateEntry call as a whole (%s: %v); the takeover had already deleted "+
					"the holder's entry %s, and its put-back, another create call, failed the same way: the pods of "+
					"the shared entry have none until SPIRE takes creates again (writes %v)", code, err, held, api.Writes())
			}
		})
	}
}

// TestAProbeCallSpireFailsDoesNotStopThePassesWithdrawals: an older policy
// withdraws admin from b/ops and, in the same pass, takes over an entry a
// younger one holds, rendering it with DNS names the holder's lacks: the
// takeover first probes SPIRE with an update of the holder's entry to the
// new fields (mask dnsNames). SPIRE fails that update call as a whole
// (dnsUpdateCalls.whole, as a proxy cutting the larger request does).
// 9c20d03/b1e7cb7 say an update call failing as a whole no longer ends
// the pass: its other updates and grant trims are still made. A probe
// call is one, yet takeOver returns its error as fatal, execute returns
// at once, and b/ops keeps admin for as long as the probe call fails.
// The per-entry failure of the same probe (control) drops only the
// takeover, and admin goes. Pre-9c20d03 code had it too.
func TestAProbeCallSpireFailsDoesNotStopThePassesWithdrawals(t *testing.T) {
	for _, whole := range []bool{false, true} {
		name := map[bool]string{false: "per-entry failure (control)", true: "whole call failure"}[whole]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			api := &dnsUpdateCalls{EntryAPI: fake.New()}
			s, _, _ := newSyncer(api)
			older, younger := owner("older", time.Hour), owner("younger", 0)
			older.Grants = entries.Grants{Admin: true}
			ops := saEntry("b", "ops")
			ops.Admin = true
			if _, err := s.Sync(ctx, older, ptrs([]entries.Entry{ops}), nil); err != nil {
				t.Fatal(err)
			}
			shared := saEntry("c", "shared")
			if out, err := s.Sync(ctx, younger, ptrs([]entries.Entry{shared}), nil); err != nil || len(out.Registered) != 1 {
				t.Fatalf("younger's pass: %v, %+v", err, out)
			}
			older.Grants = entries.Grants{}
			ops.Admin = false
			mine := shared
			mine.DNSNames = []string{"shared.c.svc"}
			api.whole, api.perEntry = whole, !whole
			_, err := s.Sync(ctx, older, ptrs([]entries.Entry{ops, mine}), nil)
			if err == nil {
				t.Fatal("the failed probe reported no error")
			}
			if !holdsPath(api.EntryAPI, "/ns/c/sa/shared") {
				t.Fatalf("the shared entry went (writes %v)", api.Writes())
			}
			if adminOf(t, api.EntryAPI, "/ns/b/sa/ops") {
				t.Errorf("%s: the policy withdrew admin from b/ops; SPIRE failed only the takeover's probe update (%v), "+
					"and b/ops is still admin: the failed probe call ended the pass before its updates (writes %v)",
					name, err, api.Writes())
			}
		})
	}
}
