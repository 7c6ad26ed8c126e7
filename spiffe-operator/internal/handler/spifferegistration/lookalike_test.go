package spifferegistration

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// A policy whose entry's ID is held by an entry made by hand under another
// parent never gets its entry made. The pass must not end as a success
// (Ready) with the entry neither registered nor reported failed.
func TestAPolicyWhoseEntryIDIsTakenByAHandMadeEntryIsNotReady(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	p := newPolicy(nil)
	want := entries.Entry{
		SpiffeID:    spiffeid.RequireFromString("spiffe://example.org/ns/a/sa/shop"),
		ParentID:    spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors:   []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: "sa:shop"}},
		X509SVIDTTL: 3600,
	}
	want.Normalize()
	id := entries.IDScheme{Prefix: "trustplane."}.EntryIDFor(entries.OwnerTag(p.UID), &want)
	squat := want
	squat.ParentID = spiffeid.RequireFromString("spiffe://example.org/elsewhere")
	squat.SpiffeID = spiffeid.RequireFromString("spiffe://example.org/hand/made")
	squat.Normalize()
	e.api.Put(squat.Proto(id))

	err := e.h.CreateOrUpdate(ctx, p)
	for _, x := range e.api.All() {
		if x.ParentId.Path == "/agent" {
			return
		}
	}
	if err == nil {
		t.Errorf("the pass succeeds (Ready) while SPIRE holds no entry for Deployment a/web: desired %d, registered %d, failed %d, failures %v",
			p.Status.EntriesDesired, p.Status.EntriesRegistered, p.Status.EntriesFailed, p.Status.Failures)
	}
}
