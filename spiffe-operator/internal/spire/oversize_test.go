package spire_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// manyDNSNames returns n distinct valid DNS names of about 250 bytes each,
// as a tenant's Services add them to an entry under autoPopulateDNSNames.
func manyDNSNames(n int) []string {
	long := strings.Repeat("a", 60)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("svc%05d-%s.%s.%s.tenant.svc", i, long[:50], long, long)
	}
	return out
}

// entryOf is an entry of the given SPIFFE ID path under the agent parent,
// for namespace ns.
func entryOf(path, ns string, dnsNames ...string) *entries.Entry {
	e := &entries.Entry{
		SpiffeID:  spiffeid.RequireFromString("spiffe://example.org" + path),
		ParentID:  spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:" + ns}, {Type: "k8s", Value: "sa:default"}},
		DNSNames:  dnsNames,
	}
	e.Normalize()
	return e
}

// TestAnEntryTooLargeForOneRequestFailsAloneAgainstSpire: against a real
// spire-server, a tenant whose Services give its entry more DNS names than
// one gRPC message to SPIRE may carry (4 MiB) made SPIRE refuse the whole
// call (ResourceExhausted). The pass stopped there, before it deleted what
// is no longer wanted: another namespace's withdrawn entry stayed
// registered for as long as the tenant kept its Services (seen failing).
// The oversized entry now fails alone, as SPIRE refusing it would, and the
// pass goes on.
func TestAnEntryTooLargeForOneRequestFailsAloneAgainstSpire(t *testing.T) {
	// The tenant's entry is new (a create), or its registered entry gains
	// the names (an update of its DNS names).
	for name, path := range map[string]string{"create": "/ns/tenant/sa/default/services", "update": "/ns/tenant/sa/default"} {
		t.Run(name, func(t *testing.T) { tooLargeForOneRequest(t, path) })
	}
}

func tooLargeForOneRequest(t *testing.T, bigPath string) {
	ctx := context.Background()
	c := spire.NewClient(spireConn(ctx, t), spire.Options{})
	s := entrysync.New(c, entrysync.Options{IDs: entries.IDScheme{Prefix: "team."}, ResyncInterval: time.Hour})
	owner := entrysync.Owner{Kind: "SpiffeRegistration", Name: "p", UID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", Created: time.Now()}

	victim := entryOf("/ns/victim/sa/default", "victim")
	tenant := entryOf("/ns/tenant/sa/default", "tenant")
	if _, err := s.Sync(ctx, owner, []*entries.Entry{victim, tenant}, nil); err != nil {
		t.Fatalf("first pass: %v", err)
	}

	// The admin deselects namespace victim; the tenant adds Services.
	big := entryOf(bigPath, "tenant", manyDNSNames(25000)...)
	out, err := s.Sync(ctx, owner, []*entries.Entry{big}, nil)
	list, lerr := c.ListByParent(ctx, victim.ParentID)
	if lerr != nil {
		t.Fatal(lerr)
	}
	var paths []string
	for _, p := range list {
		paths = append(paths, p.GetSpiffeId().GetPath())
	}
	if slices.Contains(paths, "/ns/victim/sa/default") {
		t.Errorf("namespace victim's withdrawn entry is still registered after a pass in which the tenant's entry was too large for one request (pass error: %v)", err)
	}
	i := slices.IndexFunc(out.Failed, func(f entrysync.Failed) bool { return f.Entry.Key() == big.Key() })
	if i < 0 {
		t.Fatalf("the oversized entry is not among the pass's failures: %+v (pass error: %v)", out.Failed, err)
	}
	if f := out.Failed[i]; f.Reason != codes.InvalidArgument.String() || !strings.Contains(f.Message, "DNS names") {
		t.Errorf("the oversized entry fails as %s: %q; want InvalidArgument naming its DNS names", f.Reason, f.Message)
	}
}
