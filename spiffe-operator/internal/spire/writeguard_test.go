package spire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// TestWriteGuardKeepsWritesFromTheServer proves that a write the guard
// refuses (a replica that may no longer lead) never reaches a real
// spire-server and fails as Unavailable, so the pass is retried, while reads
// go on and an allowed write lands.
func TestWriteGuardKeepsWritesFromTheServer(t *testing.T) {
	ctx := context.Background()
	conn := spireConn(ctx, t)
	var refuse error = errors.New("not the leader")
	c := spire.NewClient(conn, spire.Options{WriteGuard: func() (time.Time, error) { return time.Now().Add(time.Minute), refuse }})
	entry := &types.Entry{Id: "guarded", SpiffeId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/w"},
		ParentId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/p"}, Selectors: []*types.Selector{{Type: "unix", Value: "uid:1"}}}
	res, err := c.Create(ctx, []*types.Entry{entry})
	if err == nil || len(res) != 1 || res[0].Code != codes.Unavailable {
		t.Fatalf("a refused create: %v, %v", res, err)
	}
	if _, err := c.Delete(ctx, []string{"guarded"}); err == nil {
		t.Error("a refused delete succeeded")
	}
	all, err := c.ListAll(ctx)
	if err != nil || len(all) != 0 {
		t.Fatalf("SPIRE holds %v (%v) after refused writes", all, err)
	}
	refuse = nil
	if res, err := c.Create(ctx, []*types.Entry{entry}); err != nil || res[0].Code != codes.OK {
		t.Fatalf("an allowed create: %v, %v", res, err)
	}
}

// TestWriteGuardKeepsFederationWritesFromTheServer proves the same for
// federation relationships: a replica whose lease has lapsed sends no
// create, update or delete of a relationship.
func TestWriteGuardKeepsFederationWritesFromTheServer(t *testing.T) {
	ctx := context.Background()
	conn := spireConn(ctx, t)
	var refuse error = errors.New("not the leader")
	c := spire.NewFederationClient(conn, spire.Options{WriteGuard: func() (time.Time, error) { return time.Now().Add(time.Minute), refuse }})
	rel := &types.FederationRelationship{TrustDomain: "federated.example", BundleEndpointUrl: "https://127.0.0.1:1/bundle",
		BundleEndpointProfile: &types.FederationRelationship_HttpsWeb{HttpsWeb: &types.HTTPSWebProfile{}}}
	if err := c.Create(ctx, rel); status.Code(err) != codes.Unavailable {
		t.Fatalf("a refused create: %v", err)
	}
	if got, err := c.Get(ctx, "federated.example"); err != nil || got != nil {
		t.Fatalf("SPIRE holds %v (%v) after a refused create", got, err)
	}
	if c.Writes() != 0 {
		t.Errorf("%d writes counted as sent", c.Writes())
	}
	refuse = nil
	if err := c.Create(ctx, rel); err != nil {
		t.Fatalf("an allowed create: %v", err)
	}
	refuse = errors.New("not the leader")
	if err := c.Delete(ctx, "federated.example"); err == nil {
		t.Fatal("a refused delete succeeded")
	}
	if got, err := c.Get(ctx, "federated.example"); err != nil || got == nil {
		t.Fatalf("the relationship is gone (%v) after a refused delete", err)
	}
}

// spireConn starts a spire-server at INFO for the test and dials its admin
// API; both go when the test ends.
func spireConn(ctx context.Context, t *testing.T) *grpc.ClientConn {
	t.Helper()
	srv, err := testenv.StartSpire(testenv.SpireOptions{LogLevel: "INFO"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Cleanup(); err != nil {
			t.Error(err)
		}
	})
	conn, err := srv.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
