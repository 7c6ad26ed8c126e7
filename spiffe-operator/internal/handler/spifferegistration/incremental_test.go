package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// countingLister counts full listings, to tell full passes from
// incremental ones.
type countingLister struct {
	workload.ReaderLister
	lists int
}

func (l *countingLister) InNamespace(ctx context.Context, kind v1alpha1.WorkloadKind, namespace string, fn func(client.Object)) error {
	l.lists++
	return l.ReaderLister.InNamespace(ctx, kind, namespace, fn)
}

// snapshot is SPIRE's content and the policy's status, for comparisons.
func snapshot(e *env, p *v1alpha1.SpiffeRegistration) string {
	var out []string
	for _, x := range e.api.All() {
		var sels []string
		for _, s := range x.Selectors {
			sels = append(sels, s.Type+":"+s.Value)
		}
		out = append(out, fmt.Sprintf("%s %s %v %v", x.Id, x.SpiffeId.Path, sels, x.DnsNames))
	}
	slices.Sort(out)
	st := p.Status
	st.LastSyncTime = nil
	return fmt.Sprintf("%s\n%+v", strings.Join(out, "\n"), st)
}

// expectFullPassAgrees runs a full pass after an incremental one and
// checks that it lists workloads, writes nothing to SPIRE and reports the
// same status: the full pass is the oracle of the incremental one.
func expectFullPassAgrees(ctx context.Context, t *testing.T, e *env, l *countingLister, p *v1alpha1.SpiffeRegistration) {
	t.Helper()
	inc, lists, w := snapshot(e, p), l.lists, writes(e)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil { // nothing recorded: a full pass
		t.Fatal(err)
	}
	if l.lists == lists {
		t.Errorf("the pass did not list workloads: not a full pass")
	}
	if writes(e) != w {
		t.Errorf("a full pass after the incremental one wrote to SPIRE: %v", e.api.Writes()[w:])
	}
	if full := snapshot(e, p); full != inc {
		t.Errorf("incremental pass:\n%s\nfull pass:\n%s", inc, full)
	}
}

func writes(e *env) int {
	return e.api.CallCount("BatchCreateEntry") + e.api.CallCount("BatchUpdateEntry") + e.api.CallCount("BatchDeleteEntry")
}

// TestIncrementalPassesMatchFullPasses drives a policy through workload
// changes with incremental passes, and checks after each that a full pass
// finds nothing to write and reports the same status.
func TestIncrementalPassesMatchFullPasses(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("off", nil),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		deploy("a", "worker", "shop", map[string]string{"app": "worker"}),
		deploy("a", "solo", "solo", map[string]string{"app": "solo"}))
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	e.h.Lister, e.h.Dirty = l, NewDirty()
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.DNSNameTemplates = []string{"{name}.{namespace}.svc"}
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}"
	})
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	dep := func(namespace, name, sa string) client.Object {
		return deploy(namespace, name, sa, map[string]string{"app": name})
	}
	steps := []struct {
		name string
		do   func() error
		ns   string
		dep  string
		// after checks SPIRE after the incremental pass.
		after func(t *testing.T)
	}{
		{"create", func() error { return e.c.Create(ctx, dep("a", "new", "new")) }, "a", "new", func(t *testing.T) {
			if !slices.Contains(paths(e.api), "/ns/a/sa/new") {
				t.Errorf("entries = %v", paths(e.api))
			}
		}},
		{"shared account keeps its entry", func() error { return e.c.Delete(ctx, dep("a", "web", "")) }, "a", "web", func(t *testing.T) {
			for _, x := range e.api.All() {
				if x.SpiffeId.Path == "/ns/a/sa/shop" && !slices.Equal(x.DnsNames, []string{"worker.a.svc"}) {
					t.Errorf("shop DNS names = %v", x.DnsNames)
				}
			}
		}},
		{"service account change creates before it deletes", func() error {
			d := dep("a", "worker", "other")
			cur := dep("a", "worker", "")
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			d.SetResourceVersion(cur.GetResourceVersion())
			return e.c.Update(ctx, d)
		}, "a", "worker", func(t *testing.T) {
			got := paths(e.api)
			if slices.Contains(got, "/ns/a/sa/shop") || !slices.Contains(got, "/ns/a/sa/other") {
				t.Errorf("entries = %v", got)
			}
			log := e.api.Writes()
			if n := len(log); n < 2 || !strings.HasPrefix(log[n-2], "create") || !strings.HasPrefix(log[n-1], "delete") {
				t.Errorf("write order = %v", log)
			}
		}},
		{"unselected namespace", func() error { return e.c.Create(ctx, dep("off", "x", "x")) }, "off", "x", func(t *testing.T) {
			if slices.Contains(paths(e.api), "/ns/off/sa/x") {
				t.Errorf("entries = %v", paths(e.api))
			}
		}},
		{"unchanged render writes nothing", func() error {
			cur := dep("a", "solo", "")
			if err := e.c.Get(ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			cur.SetAnnotations(map[string]string{"touched": "yes"})
			return e.c.Update(ctx, cur)
		}, "a", "solo", nil},
		{"delete", func() error { return e.c.Delete(ctx, dep("a", "new", "")) }, "a", "new", func(t *testing.T) {
			if slices.Contains(paths(e.api), "/ns/a/sa/new") {
				t.Errorf("entries = %v", paths(e.api))
			}
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, s.ns, s.dep)
			lists, before := l.lists, writes(e)
			if err := e.h.CreateOrUpdate(ctx, p); err != nil {
				t.Fatal(err)
			}
			if l.lists != lists {
				t.Errorf("the pass listed workloads: not incremental")
			}
			if s.after != nil {
				s.after(t)
			} else if writes(e) != before {
				t.Errorf("an unchanged render wrote to SPIRE: %v", e.api.Writes())
			}
			expectFullPassAgrees(ctx, t, e, l, p)
		})
	}
}

// TestIncrementalPassReportsRenderFailures checks that a workload that
// fails to render, and then is fixed, is counted like a full pass would.
func TestIncrementalPassReportsRenderFailures(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	e.h.Lister, e.h.Dirty = workload.ReaderLister{Reader: e.c}, NewDirty()
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "app/{label:app}" })
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	bad := deploy("a", "nolabel", "shop2", map[string]string{"app": "x"})
	bad.Labels = nil
	if err := e.c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "nolabel")
	err := e.h.CreateOrUpdate(ctx, p)
	if err == nil || p.Status.EntriesFailed != 1 || p.Status.WorkloadsSelected != 2 || p.Status.EntriesRegistered != 1 {
		t.Fatalf("err = %v, status = %+v", err, p.Status)
	}
	if err := e.c.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "nolabel")
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || p.Status.EntriesFailed != 0 || p.Status.Failures != nil {
		t.Fatalf("err = %v, status = %+v", err, p.Status)
	}
}

// TestIncrementalPassFallsBackWhenTheViewIsDue checks that a workload event
// after the resync interval gets a full pass that re-reads SPIRE.
func TestIncrementalPassFallsBackWhenTheViewIsDue(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour,
		Now: func() time.Time { return now }})
	e.h.Lister, e.h.Dirty = workload.ReaderLister{Reader: e.c}, NewDirty()
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Drift: the entry deleted by hand.
	e.api.Remove(e.api.All()[0].Id)
	if err := e.c.Create(ctx, deploy("a", "new", "new", map[string]string{"app": "new"})); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour)
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "new")
	lists := e.api.CallCount("ListEntries")
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if e.api.CallCount("ListEntries") != lists+1 {
		t.Errorf("SPIRE not re-read")
	}
	if got := paths(e.api); len(got) != 2 {
		t.Errorf("entries = %v, want the repaired one and the new one", got)
	}
}

// TestIncrementalPassRetriesARefusedEntryItConcerns: a workload's entry
// SPIRE refused is tried again by the next incremental pass of that
// workload, though its render did not change.
func TestIncrementalPassRetriesARefusedEntryItConcerns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	e.h.Lister, e.h.Dirty = l, NewDirty()
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}" })
	e.api.Reject["spiffe://example.org/ns/a/sa/shop"] = true
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("a pass whose create SPIRE refused reported no error")
	}
	delete(e.api.Reject, "spiffe://example.org/ns/a/sa/shop")
	d := deploy("a", "web", "", nil)
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	d.Annotations = map[string]string{"touched": "yes"}
	if err := e.c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
	lists := l.lists
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatalf("the incremental pass after SPIRE accepts the entry: %v", err)
	}
	if l.lists != lists {
		t.Errorf("the pass listed workloads: not incremental")
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/shop"}) {
		t.Errorf("entries = %v", got)
	}
	expectFullPassAgrees(ctx, t, e, l, p)
}
