package spifferegistration

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestAHeldStatusReplacedKeepsLastSyncTime checks the attack of a tenant
// who keeps editing a Deployment that a shared policy selects while the
// policy writes another workload's entry: the pass that wrote lets its
// status wait (controller.StatusMayWait), the edit's pass replaces the
// held status with its own, and that pass talks to nobody. Its status must
// still say when the policy last talked to SPIRE, not the time the status
// on the server had before.
func TestAHeldStatusReplacedKeepsLastSyncTime(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "web", map[string]string{"app": "web"}))
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := start
	e.h.Now = func() time.Time { return now }
	e.h.Lister, e.h.Dirty = workload.ReaderLister{Reader: e.c}, NewDirty()
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := p.Status.LastSyncTime; got == nil || !got.Time.Equal(start) {
		t.Fatalf("the first pass reports lastSyncTime %v, want %v", got, start)
	}
	onServer := p.DeepCopy() // the status the server keeps while later ones are held back

	// A new workload: its pass writes its entry and lets its status wait.
	now = start.Add(10 * time.Second)
	wrote := now
	if err := e.c.Create(ctx, deploy("a", "fresh", "fresh", map[string]string{"app": "fresh"})); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "fresh")
	held, notes := controller.WithEventPassNotes(ctx)
	before := writes(e)
	if err := e.h.CreateOrUpdate(held, p); err != nil {
		t.Fatal(err)
	}
	if writes(e) == before {
		t.Fatalf("the new workload's pass wrote nothing to SPIRE")
	}
	if !notes.StatusMayWait() {
		t.Fatalf("the new workload's pass did not let its status wait; the attack needs it to")
	}

	// The tenant edits web (its entry stays the same) before the held
	// status is written: the edit's pass starts from the status on the
	// server and writes nothing to SPIRE.
	now = start.Add(20 * time.Second)
	web := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, web); err != nil {
		t.Fatal(err)
	}
	web.Labels["edited"] = "1"
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
	before = writes(e)
	edit, editNotes := controller.WithEventPassNotes(ctx)
	if err := e.h.CreateOrUpdate(edit, onServer); err != nil {
		t.Fatal(err)
	}
	if writes(e) != before {
		t.Fatalf("the edit's pass wrote to SPIRE: %v", e.api.Writes()[before:])
	}
	if got := onServer.Status.LastSyncTime; got == nil || !got.Time.Equal(wrote) {
		t.Errorf("the edit's pass reports lastSyncTime %v, want %v (when the new workload's entry was written)", got, wrote)
	}
	if got := onServer.Status.EntriesRegistered; got != 2 {
		t.Errorf("the edit's pass reports %d entries registered, want 2", got)
	}
	if !editNotes.StatusComplete() {
		t.Errorf("the edit's pass set its whole status but did not say so (controller.StatusComplete)")
	}

	// A new generation keeps the record: its first pass is a full one
	// that finds nothing to write and reads no view again (they are
	// younger than the resync interval), and reports the time of the
	// last write.
	now = start.Add(30 * time.Second)
	next := onServer.DeepCopy()
	next.Generation++
	next.Status.LastSyncTime = p.Status.LastSyncTime.DeepCopy()
	next.Status.LastSyncTime.Time = start
	before = writes(e)
	if err := e.h.CreateOrUpdate(ctx, next); err != nil {
		t.Fatal(err)
	}
	if writes(e) != before {
		t.Fatalf("the new generation's first pass wrote to SPIRE: %v", e.api.Writes()[before:])
	}
	if got := next.Status.LastSyncTime; got == nil || !got.Time.Equal(wrote) {
		t.Errorf("the new generation's first pass reports lastSyncTime %v, want %v", got, wrote)
	}

	// A pass that fails before it reports (SPIRE is down when it writes
	// a third workload's entry) keeps the time too.
	now = start.Add(40 * time.Second)
	if err := e.c.Create(ctx, deploy("a", "third", "third", map[string]string{"app": "third"})); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "third")
	failing := next.DeepCopy()
	failing.Status.LastSyncTime.Time = start
	e.api.SetUnavailable(true)
	fails, failNotes := controller.WithEventPassNotes(ctx)
	if err := e.h.CreateOrUpdate(fails, failing); err == nil {
		t.Fatalf("the pass succeeded with SPIRE down")
	}
	e.api.SetUnavailable(false)
	if got := failing.Status.LastSyncTime; got == nil || !got.Time.Equal(wrote) {
		t.Errorf("the failed pass reports lastSyncTime %v, want %v", got, wrote)
	}
	if failNotes.StatusComplete() {
		t.Errorf("the failed pass returned before setting its counts but said its status was complete")
	}

	// Another writer (a second instance, a clock gone wrong) leaves a time
	// an hour ahead. A pass that talks to nobody reports it as it read it,
	// but the operator does not take it for its own: the next pass that
	// writes to SPIRE reports its own time.
	now = start.Add(50 * time.Second)
	settled := next.DeepCopy()
	if err := e.h.CreateOrUpdate(ctx, settled); err != nil { // SPIRE is back: the third workload's entry
		t.Fatal(err)
	}
	ahead := settled.DeepCopy()
	ahead.Status.LastSyncTime = &metav1.Time{Time: start.Add(time.Hour)}
	web.Labels["edited"] = "2"
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
	before = writes(e)
	quiet, _ := controller.WithEventPassNotes(ctx)
	if err := e.h.CreateOrUpdate(quiet, ahead); err != nil {
		t.Fatal(err)
	}
	if writes(e) != before {
		t.Fatalf("the edit's pass wrote to SPIRE: %v", e.api.Writes()[before:])
	}
	if got := ahead.Status.LastSyncTime; got == nil || !got.Time.Equal(start.Add(time.Hour)) {
		t.Errorf("a pass that talked to nobody reports %v, want the time it read, %v", got, start.Add(time.Hour))
	}
	now = start.Add(60 * time.Second)
	if err := e.c.Create(ctx, deploy("a", "fourth", "fourth", map[string]string{"app": "fourth"})); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "fourth")
	talks := ahead.DeepCopy()
	talks.Status.LastSyncTime = &metav1.Time{Time: start}
	before = writes(e)
	writesTo, _ := controller.WithEventPassNotes(ctx)
	if err := e.h.CreateOrUpdate(writesTo, talks); err != nil {
		t.Fatal(err)
	}
	if writes(e) == before {
		t.Fatalf("the new workload's pass wrote nothing to SPIRE")
	}
	if got := talks.Status.LastSyncTime; got == nil || !got.Time.Equal(now) {
		t.Errorf("a pass that wrote to SPIRE after another writer's time reports %v, want %v", got, now)
	}
}
