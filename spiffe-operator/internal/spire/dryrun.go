package spire

import (
	"context"

	"github.com/go-logr/logr"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
)

// DryRun is an EntryAPI that reads through to SPIRE and writes nothing:
// each write it is asked for is logged, counted in
// trustplane_spire_dry_run_writes_total, and answered as SPIRE answers a
// write that succeeded (so the caller plans on as if it had).
type DryRun struct {
	api     EntryAPI
	log     logr.Logger
	metrics *Metrics
}

var _ EntryAPI = (*DryRun)(nil)

// NewDryRun returns a DryRun reading through api; metrics may be nil.
func NewDryRun(api EntryAPI, log logr.Logger, metrics *Metrics) *DryRun {
	return &DryRun{api: api, log: log, metrics: metrics}
}

// ListByParent implements EntryAPI.
func (d *DryRun) ListByParent(ctx context.Context, parent spiffeid.ID) ([]*types.Entry, error) {
	return d.api.ListByParent(ctx, parent)
}

// ListAll implements EntryAPI.
func (d *DryRun) ListAll(ctx context.Context) ([]*types.Entry, error) { return d.api.ListAll(ctx) }

// Exists implements EntryAPI.
func (d *DryRun) Exists(ctx context.Context, id string) (bool, error) { return d.api.Exists(ctx, id) }

// Create implements EntryAPI: it creates nothing.
func (d *DryRun) Create(_ context.Context, in []*types.Entry) ([]Result, error) {
	out := make([]Result, len(in))
	for i, e := range in {
		d.log.Info("dry run: would create entry", "entryID", e.GetId(), "spiffeID", idString(e.GetSpiffeId()),
			"parentID", idString(e.GetParentId()), "selectors", selectorStrings(e.GetSelectors()))
		out[i] = Result{Code: codes.OK, Entry: e}
	}
	d.metrics.dryRun("BatchCreateEntry", len(in))
	return out, nil
}

// Update implements EntryAPI: it updates nothing.
func (d *DryRun) Update(_ context.Context, in []*types.Entry, mask *types.EntryMask) ([]Result, error) {
	out := make([]Result, len(in))
	for i, e := range in {
		d.log.Info("dry run: would update entry", "entryID", e.GetId(), "spiffeID", idString(e.GetSpiffeId()), "mask", mask.String())
		out[i] = Result{Code: codes.OK, Entry: e}
	}
	d.metrics.dryRun("BatchUpdateEntry", len(in))
	return out, nil
}

// Delete implements EntryAPI: it deletes nothing.
func (d *DryRun) Delete(_ context.Context, ids []string) ([]Result, error) {
	out := make([]Result, len(ids))
	for i, id := range ids {
		d.log.Info("dry run: would delete entry", "entryID", id)
		out[i] = Result{Code: codes.OK}
	}
	d.metrics.dryRun("BatchDeleteEntry", len(ids))
	return out, nil
}

func idString(id *types.SPIFFEID) string {
	if id == nil {
		return ""
	}
	return "spiffe://" + id.TrustDomain + id.Path
}

func selectorStrings(sels []*types.Selector) []string {
	out := make([]string, len(sels))
	for i, s := range sels {
		out[i] = s.Type + ":" + s.Value
	}
	return out
}
