package spire_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

func TestDryRunWritesNothingAndLogsAndCountsEveryWrite(t *testing.T) {
	ctx := context.Background()
	api := spirefake.New()
	existing := &types.Entry{Id: "keep", SpiffeId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/a"},
		ParentId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/p"}, Selectors: []*types.Selector{{Type: "k8s", Value: "ns:a"}}}
	if res, err := api.Create(ctx, []*types.Entry{existing}); err != nil || res[0].Code != codes.OK {
		t.Fatalf("seed: %v %v", res, err)
	}
	reg := prometheus.NewRegistry()
	m, err := spire.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	d := spire.NewDryRun(api, log, m)

	created := &types.Entry{Id: "new", SpiffeId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/b"},
		ParentId: &types.SPIFFEID{TrustDomain: "example.org", Path: "/p"}, Selectors: []*types.Selector{{Type: "k8s", Value: "ns:b"}}}
	res, err := d.Create(ctx, []*types.Entry{created})
	if err != nil || res[0].Code != codes.OK || res[0].Entry.GetId() != "new" {
		t.Fatalf("Create = %v, %v", res, err)
	}
	if res, err := d.Update(ctx, []*types.Entry{existing}, &types.EntryMask{Hint: true}); err != nil || res[0].Code != codes.OK {
		t.Fatalf("Update = %v, %v", res, err)
	}
	if res, err := d.Delete(ctx, []string{"keep"}); err != nil || res[0].Code != codes.OK {
		t.Fatalf("Delete = %v, %v", res, err)
	}
	all := api.All()
	if len(all) != 1 || all[0].Id != "keep" {
		t.Errorf("SPIRE holds %v, want only the seeded entry", all)
	}
	list, err := d.ListAll(ctx)
	if err != nil || len(list) != 1 {
		t.Errorf("reads do not go through: %v, %v", list, err)
	}
	if len(logged) != 3 {
		t.Errorf("logged %d writes, want 3: %v", len(logged), logged)
	}
	for _, method := range []string{"BatchCreateEntry", "BatchUpdateEntry", "BatchDeleteEntry"} {
		if n := dryRunCount(t, reg, method); n != 1 {
			t.Errorf("%s counted %v, want 1", method, n)
		}
	}
}

// dryRunCount returns the dry-run counter of method in reg.
func dryRunCount(t *testing.T, reg *prometheus.Registry, method string) float64 {
	t.Helper()
	n, err := testenv.MetricSum(reg, "trustplane_spire_dry_run_writes_total", map[string]string{"method": method})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
