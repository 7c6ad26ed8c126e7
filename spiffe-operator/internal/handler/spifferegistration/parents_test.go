package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"golang.org/x/net/idna"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// lateAnswers is SPIRE whose next create call lands but whose answer
// never arrives: the client's deadline passes after the server committed,
// as it does under load.
type lateAnswers struct {
	*spirefake.EntryAPI
	armed bool
}

func (l *lateAnswers) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	res, err := l.EntryAPI.Create(ctx, in)
	if !l.armed || err != nil {
		return res, err
	}
	l.armed = false
	for i := range res {
		res[i] = spire.Result{Code: codes.DeadlineExceeded, Message: "context deadline exceeded"}
	}
	return res, status.Error(codes.DeadlineExceeded, "context deadline exceeded")
}

// TestCreateThatLandedUnansweredKeepsItsParentRecorded: an incremental pod
// pass creates an account's entry under a node whose view is read (the
// account had a pod there a moment ago); SPIRE commits the create but the
// answer times out. The pod is gone before the retry. The entry must be
// found again and deleted (by the retry, by a later pass, or at the latest
// when the policy is deleted), which needs its node in status.parentIDs or
// in the view: a full pass that failed the same way records every parent
// it considered.
func TestCreateThatLandedUnansweredKeepsItsParentRecorded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"}))
	api := &lateAnswers{EntryAPI: e.api}
	e.h.Syncer = entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	e.h.Lister, e.h.Dirty, e.h.Nodes, e.h.ClusterName = l, NewDirty(), nodes.CacheGetter(e.c), "c1"
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" })
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := entriesWithParents(e); len(got) != 2 {
		t.Fatalf("first pass: entries = %v", got)
	}
	// The pod on n2 goes: its entry goes, n2's view stays read.
	if err := e.c.Delete(ctx, runningPod("a", "web-2", "", "", nil)); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Account(p.Name, "a", "shop")
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := entriesWithParents(e); len(got) != 1 || !strings.HasSuffix(got[0], "/uid-n1") {
		t.Fatalf("after the pod on n2 went: entries = %v", got)
	}
	// A new pod on n2: the incremental pass's create lands, its answer
	// times out.
	if err := e.c.Create(ctx, runningPod("a", "web-3", "shop", "n2", map[string]string{"app": "web"})); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Account(p.Name, "a", "shop")
	api.armed = true
	lists := l.lists
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("a pass whose create timed out reported no error")
	}
	if l.lists != lists {
		t.Fatalf("the pod event's pass listed workloads: not incremental")
	}
	if got := entriesWithParents(e); len(got) != 2 {
		t.Fatalf("the create did not land: entries = %v", got)
	}
	t.Logf("status.parentIDs after the failed pass: %v", p.Status.ParentIDs)
	// The pod goes before the retry (a short Job, or deleted by its owner).
	if err := e.c.Delete(ctx, runningPod("a", "web-3", "", "", nil)); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Account(p.Name, "a", "shop")
	for i := 0; i < 2; i++ {
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := entriesWithParents(e); len(got) != 1 || !strings.HasSuffix(got[0], "/uid-n1") {
		t.Errorf("no pod of the account runs on n2, yet SPIRE holds: %v (status.parentIDs %v)", got, p.Status.ParentIDs)
	}
	if err := e.h.Delete(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := entriesWithParents(e); len(got) != 0 {
		t.Errorf("the policy is deleted, yet SPIRE holds its entries: %v", got)
	}
}

// perEntryRule is SPIRE whose entry API fails, with the code and message
// fail gives, the creates fail picks, and passes the others to the fake.
type perEntryRule struct {
	*spirefake.EntryAPI
	fail func(e *types.Entry) (code codes.Code, message string, failed bool)
}

func (s perEntryRule) Create(ctx context.Context, in []*types.Entry) ([]spire.Result, error) {
	return s.apply(in, func(e *types.Entry) *types.Entry { return e }, func(pass []*types.Entry) ([]spire.Result, error) {
		return s.EntryAPI.Create(ctx, pass)
	})
}

// Update fails the updates fail picks, as Create does; an update whose mask
// leaves the DNS names out is judged without them, as SPIRE does.
func (s perEntryRule) Update(ctx context.Context, in []*types.Entry, m *types.EntryMask) ([]spire.Result, error) {
	judged := func(e *types.Entry) *types.Entry {
		if m.GetDnsNames() {
			return e
		}
		return &types.Entry{Id: e.Id, SpiffeId: e.SpiffeId, ParentId: e.ParentId, Selectors: e.Selectors}
	}
	return s.apply(in, judged, func(pass []*types.Entry) ([]spire.Result, error) { return s.EntryAPI.Update(ctx, pass, m) })
}

// apply fails the entries of in that fail picks (as judged shows them) and
// passes the others to call, merging the results in order.
func (s perEntryRule) apply(in []*types.Entry, judged func(*types.Entry) *types.Entry,
	call func([]*types.Entry) ([]spire.Result, error)) ([]spire.Result, error) {
	var pass []*types.Entry
	var idx []int
	out := make([]spire.Result, len(in))
	for i, e := range in {
		if code, msg, failed := s.fail(judged(e)); failed {
			out[i] = spire.Result{Code: code, Message: msg}
			continue
		}
		pass, idx = append(pass, e), append(idx, i)
	}
	res, err := call(pass)
	for j, r := range res {
		out[idx[j]] = r
	}
	return out, err
}

// spireDNSRules is SPIRE whose entry API checks DNS names as SPIRE's
// x509util.ValidateLabel does (an IDNA profile with CheckHyphens): a label
// with "--" in its third and fourth characters, which Kubernetes allows in
// object names, is refused with InvalidArgument.
func spireDNSRules(api *spirefake.EntryAPI) perEntryRule {
	return perEntryRule{api, func(e *types.Entry) (codes.Code, string, bool) {
		return codes.InvalidArgument, "failed to convert entry: invalid DNS name: idna error", spireRefusesDNS(e)
	}}
}

var spireIDNA = idna.New(idna.StrictDomainName(true), idna.ValidateLabels(true), idna.VerifyDNSLength(true),
	idna.CheckJoiners(true), idna.BidiRule(), idna.CheckHyphens(true))

func spireRefusesDNS(e *types.Entry) bool {
	for _, n := range e.DnsNames {
		n = strings.TrimPrefix(n, "*.")
		if got, err := spireIDNA.ToASCII(n); err != nil || got != n {
			return true
		}
	}
	return false
}

// TestRefusalInAnAccountDoesNotKeepAWithdrawnIdentity: with per-workload
// identities, the policy stops selecting the workload web (an admin narrows
// workloadSelector) once web's pods are gone, so its entry must go. A
// tenant of the namespace creates, under the same service account, a
// Deployment whose name SPIRE refuses in a DNS name ("ab--x", valid in
// Kubernetes). That refused create holds back every stale entry of the
// account, web's withdrawn one included, for as long as the tenant keeps
// the Deployment; a pod the tenant then starts with web's labels is served
// web's identity, which the policy no longer grants.
func TestRefusalInAnAccountDoesNotKeepAWithdrawnIdentity(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "shop", map[string]string{"app": "web"}))
	e.h.Syncer = entrysync.New(spireDNSRules(e.api), entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour,
		Pods: func(context.Context, string, string) ([]entrysync.Pod, error) { return nil, nil }})
	p := newPolicy(perWorkloadIdentities)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/shop/web"}) {
		t.Fatalf("first pass: entries = %v", got)
	}
	// The tenant's Deployment whose DNS name SPIRE refuses.
	if err := e.c.Create(ctx, deploy("a", "ab--x", "shop", map[string]string{"app": "ab--x"})); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("SPIRE refused nothing")
	}
	// The admin withdraws web's identity; no pod of web runs.
	p.Spec.WorkloadSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"web"}}}}
	p.Generation++
	passes(ctx, e.h, p, 3)
	if got := paths(e.api); slices.Contains(got, "/ns/a/sa/shop/web") {
		t.Errorf("web is withdrawn and no pod needs its entry, yet SPIRE holds: %v (status failures %+v)", got, p.Status.Failures)
	}
}
