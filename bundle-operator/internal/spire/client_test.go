package spire_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// TestClientReadsTheServerBundleOverTheAdminSocket runs against a real
// spire-server: the bundle from GetBundle must equal `spire-server bundle show`.
func TestClientReadsTheServerBundleOverTheAdminSocket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "example.org"})
	if err != nil {
		t.Fatalf("start spire: %v", err)
	}
	t.Cleanup(func() { _ = s.Cleanup() })

	c, err := spire.Dial(ctx, spireconn.Options{SocketPath: s.SocketPath})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.ServerBundle(ctx)
	if err != nil {
		t.Fatalf("ServerBundle() = %v", err)
	}
	if b.TrustDomain != "example.org" || len(b.X509Authorities) == 0 || len(b.JWTAuthorities) == 0 {
		t.Fatalf("ServerBundle() = %s with %d X.509 and %d JWT authorities, want example.org with both", b.TrustDomain, len(b.X509Authorities), len(b.JWTAuthorities))
	}
	for _, k := range b.JWTAuthorities {
		if k.ExpiresAt <= time.Now().Unix() {
			t.Errorf("JWT authority %q expires at %d; want SPIRE's expiry, in the future", k.KeyID, k.ExpiresAt)
		}
	}
	shown, err := s.BundlePEM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := bundle.ParsePEM([]byte(shown))
	if err != nil {
		t.Fatal(err)
	}
	got, err := bundle.ParseDER(b.X509Authorities)
	if err != nil {
		t.Fatal(err)
	}
	if !bundle.New(got, nil).Equal(bundle.New(want, nil)) {
		t.Error("GetBundle and `bundle show` disagree")
	}
	fed, err := c.FederatedBundles(ctx)
	if err != nil || len(fed) != 0 {
		t.Errorf("FederatedBundles() = %v, %v; want none", fed, err)
	}

	// Rotation: a prepared authority is published in the bundle at once.
	if _, err := s.CLI(ctx, "localauthority", "x509", "prepare"); err != nil {
		t.Fatal(err)
	}
	after, err := c.ServerBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.X509Authorities) != len(b.X509Authorities)+1 || after.SequenceNumber <= b.SequenceNumber {
		t.Errorf("after prepare: %d authorities, sequence %d; want %d and > %d", len(after.X509Authorities), after.SequenceNumber, len(b.X509Authorities)+1, b.SequenceNumber)
	}
}

// TestClientConnectsOverMTLSWithAnSVIDFromTheWorkloadAPI runs a real agent:
// the operator's X509-SVID comes from the Workload API and authenticates it
// to the server's TCP API as an admin (ListFederatedBundles needs that).
func TestClientConnectsOverMTLSWithAnSVIDFromTheWorkloadAPI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const operatorID = "spiffe://example.org/bundle-operator"
	s, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "example.org", AdminIDs: []string{operatorID}})
	if err != nil {
		t.Fatalf("start spire: %v", err)
	}
	t.Cleanup(func() { _ = s.Cleanup() })
	agent, err := s.StartAgent(ctx)
	if err != nil {
		t.Fatalf("start agent: %v", err)
	}
	t.Cleanup(func() { _ = agent.Cleanup() })
	if out, err := s.CLI(ctx, "entry", "create", "-parentID", agent.ID, "-spiffeID", operatorID,
		"-selector", fmt.Sprintf("unix:uid:%d", os.Getuid())); err != nil {
		t.Fatalf("create entry: %v\n%s", err, out)
	}

	if _, err := spire.Dial(ctx, spireconn.Options{Address: s.Address, WorkloadAPISocket: agent.SocketPath}); err == nil {
		t.Fatal("Dial() without the server ID succeeded; it must refuse an unauthenticated server")
	}
	c, err := spire.Dial(ctx, spireconn.Options{Address: s.Address, WorkloadAPISocket: agent.SocketPath, ServerID: s.ServerID})
	if err != nil {
		t.Fatalf("Dial() over mTLS = %v", err)
	}
	defer c.Close()
	b, err := c.ServerBundle(ctx)
	if err != nil {
		t.Fatalf("ServerBundle() over mTLS = %v", err)
	}
	if b.TrustDomain != "example.org" || len(b.X509Authorities) == 0 {
		t.Fatalf("ServerBundle() = %+v", b)
	}
	if _, err := c.FederatedBundles(ctx); err != nil {
		t.Fatalf("FederatedBundles() as an admin over mTLS = %v", err)
	}
}
