package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// selectingPod lists "path [selectors]" of the SPIRE entries that select a
// pod of namespace and service account sa with these labels (k8s
// selectors only: ns, sa, pod-label).
func selectingPod(all []*types.Entry, namespace, sa string, podLabels map[string]string) []string {
	var out []string
	for _, x := range all {
		ok := true
		var sels []string
		for _, s := range x.Selectors {
			sels = append(sels, s.Type+":"+s.Value)
			switch {
			case s.Type != "k8s":
				ok = false
			case s.Value == "ns:"+namespace, s.Value == "sa:"+sa:
			case strings.HasPrefix(s.Value, "pod-label:"):
				kv := strings.SplitN(strings.TrimPrefix(s.Value, "pod-label:"), ":", 2)
				if len(kv) != 2 || podLabels[kv[0]] != kv[1] {
					ok = false
				}
			default:
				ok = false
			}
		}
		if ok {
			out = append(out, fmt.Sprintf("%s %v", x.SpiffeId.Path, sels))
		}
	}
	slices.Sort(out)
	return out
}

// TestAFallbackNeverGivesPodsOfAnotherPolicysWorkloadASecondIdentity: main
// selects web and api, both running as service account shop. main renders
// api (it has the team label) and cannot render web. Before f18e135 the
// fallback yielded both; now it registers web, and its entry, keyed by
// namespace and service account, selects every pod of shop: api's pods
// hold main's identity and the fallback's at once, for as long as web
// fails to render (not a pass-long hand-over); seen failing. The fallback
// leaves such a workload unregistered, and its status names it
// (SharesPodsWithAnotherPolicy).
func TestAFallbackNeverGivesPodsOfAnotherPolicysWorkloadASecondIdentity(t *testing.T) {
	ctx := context.Background()
	e, apiL := shopEnv(t)
	main, fb, _ := mainAndStoredFallback(t, e, teamTemplate)
	twoPasses(ctx, e, main, fb)
	if !failureNames(main, "Deployment a/web") {
		t.Fatalf("precondition: main's render of web should fail, failures %+v", main.Status.Failures)
	}
	if !slices.ContainsFunc(fb.Status.Failures, func(f v1alpha1.Failure) bool {
		return f.Object == "Deployment a/web" && f.Reason == ReasonSharesPodsWithAnotherPolicy
	}) {
		t.Errorf("the fallback's status does not say why it leaves web unregistered: failures %+v", fb.Status.Failures)
	}
	got := selectingPod(e.api.All(), "a", "shop", apiL)
	if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, mainPay+" ") }) {
		t.Fatalf("precondition: main should register api; entries selecting api-1: %v (SPIRE holds %v)", got, sortedPaths(e.api))
	}
	if len(got) > 1 {
		t.Errorf("Deployment a/api, which main renders and registers, holds two identities: the fallback registers web, "+
			"which shares api's service account, with an entry selecting every pod of it. Entries selecting api-1: %v", got)
	}
}

// TestARestartKeepsTheFallbacksEntryOfAWorkloadWithoutPods: the
// fallback registers Deployment a/api (scaled to zero, or between
// rollouts: no pod runs), which main selects but cannot render. After a
// restart the fallback's pass comes before main's first: it yields api to
// main, which is not judged yet, and with no pod to retain it the entry is
// deleted; main's pass then wakes the fallback, which creates it again.
// SPIRE's state churns across a restart, and a pod of api started in the
// window gets no identity from anyone.
func TestARestartKeepsTheFallbacksEntryOfAWorkloadWithoutPods(t *testing.T) {
	ctx := context.Background()
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "api", "api", map[string]string{"app": "api"}))
	main, fb, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	pass()
	want := []string{"/fallback/ns/a/sa/api"}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Fatalf("precondition: SPIRE holds %v, want %v", got, want)
	}
	storeStatuses(ctx, t, e, main, fb)
	idsBefore := entryIDs(e)

	e.h = restarted(e)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Errorf("after a restart, the fallback's pass before main's first left SPIRE holding %v, want %v "+
			"(main cannot render api and keeps nothing for it; its status records no kept entry)", got, want)
	}
	_ = e.h.CreateOrUpdate(ctx, main)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Errorf("after both passes SPIRE holds %v, want %v", got, want)
	}
	t.Logf("entry IDs before the restart %v, after %v", idsBefore, entryIDs(e))
}

func entryIDs(e *env) []string {
	var out []string
	for _, x := range e.api.All() {
		out = append(out, x.Id)
	}
	slices.Sort(out)
	return out
}

// TestABadEditTakesNoIdentityThePolicyNeverHeld:
// main renders api and cannot render web (no team label), so the fallback
// registers web, and the process knows main holds nothing for web (its
// published unheld set). main's spec is then edited into one that does not
// compile: main keeps what it registered (api's entry) and nothing for
// web, yet the fallback yields web to it, as to every workload its
// selectors select. After web's pods roll, web has no identity at all.
func TestABadEditTakesNoIdentityThePolicyNeverHeld(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	apiL := map[string]string{"app": "api"}
	api := deploy("a", "api", "api", apiL)
	api.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "web", webL), api,
		runningPod("a", "web-1", "web", "", webL), runningPod("a", "api-1", "api", "", apiL))
	main, _, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	pass()
	want := []string{fallbackForWeb, mainPay}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Fatalf("precondition: SPIRE holds %v, want %v", got, want)
	}

	cur := &v1alpha1.SpiffeRegistration{}
	if err := e.c.Get(ctx, client.ObjectKey{Name: "main"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.SpiffeIDTemplate = "ns/{namespace}/team/{label:team}/{serviceAcount}"
	cur.Generation = 2
	cur.Status = main.Status
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	main.Spec.SpiffeIDTemplate, main.Generation = cur.Spec.SpiffeIDTemplate, 2
	pass()
	rollWeb(ctx, t, e)
	pass()
	pass()
	got := sortedPaths(e.api)
	if !slices.Contains(got, mainPay) {
		t.Fatalf("precondition: main keeps api's entry across its bad edit; SPIRE holds %v", got)
	}
	if !slices.Contains(got, fallbackForWeb) {
		t.Errorf("Deployment a/web lost its only identity: main, whose spec no longer compiles, never held an entry for it "+
			"(the process published it as unheld), yet the fallback yields it: SPIRE holds %v", got)
	}
}

// TestFallbackAndPolicyPassesRunTogether runs main's and the fallback's
// passes concurrently on one handler, as the controller does for two
// policies, while web's team label flips: the fallback reads what main's
// passes publish. Run with -race.
func TestFallbackAndPolicyPassesRunTogether(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "web", webL),
		deploy("a", "api", "api", map[string]string{"app": "api"}), runningPod("a", "web-1", "web", "", webL))
	main, fb, _ := mainAndStoredFallback(t, e, teamTemplate)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		m := main.DeepCopy()
		for i := range 30 {
			team := ""
			if i%2 == 0 {
				team = "pay"
			}
			cur := deploy("a", "web", "web", webL)
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, cur); err == nil {
				if team == "" {
					delete(cur.Labels, "team")
				} else {
					cur.Labels["team"] = team
				}
				_ = e.c.Update(ctx, cur)
			}
			_ = e.h.CreateOrUpdate(ctx, m)
		}
	}()
	go func() {
		defer wg.Done()
		f := fb.DeepCopy()
		for range 30 {
			_ = e.h.CreateOrUpdate(ctx, f)
		}
	}()
	wg.Wait()
}

// TestAPolicyWhoseEntrySPIRERefusesTakesNoIdentity: the
// fallback registers web. A policy main is created that renders web, but
// SPIRE refuses main's entry (InvalidArgument: a rejected ID, as for any
// entry SPIRE will not take): main holds no entry for web, yet the
// fallback yields web to it because it renders. Once web's pods roll, web
// holds no identity at all.
func TestAPolicyWhoseEntrySPIRERefusesTakesNoIdentity(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", webL)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, runningPod("a", "web-1", "web", "", webL))
	e.api.Reject["spiffe://example.org"+mainPay] = true
	fb := storedFallback(ctx, t, e)
	if err := e.h.CreateOrUpdate(ctx, fb); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
		t.Fatalf("precondition: SPIRE holds %v", got)
	}
	main := storedPolicy(ctx, t, e, "main", teamTemplate)
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	rollWeb(ctx, t, e)
	for range 2 {
		_ = e.h.CreateOrUpdate(ctx, main)
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if got := paths(e.api); len(got) == 0 {
		t.Errorf("Deployment a/web holds no identity: main renders it but SPIRE refuses main's entry (main failures %+v), "+
			"and the fallback yields it to main all the same", main.Status.Failures)
	}
}
