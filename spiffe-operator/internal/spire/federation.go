package spire

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	trustdomainv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/trustdomain/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FederationAPI is what the operator needs from the SPIRE TrustDomain API.
// A relationship has no ID: its trust domain names it. A write SPIRE
// refuses returns an error carrying SPIRE's per-item code and message.
type FederationAPI interface {
	// Get returns the relationship with the trust domain, or nil when there is none.
	Get(ctx context.Context, trustDomain string) (*types.FederationRelationship, error)
	// Create creates a relationship.
	Create(ctx context.Context, r *types.FederationRelationship) error
	// Update updates a relationship, sending only the fields in mask.
	Update(ctx context.Context, r *types.FederationRelationship, mask *types.FederationRelationshipMask) error
	// Delete deletes the relationship with the trust domain; one that is
	// already gone is no error.
	Delete(ctx context.Context, trustDomain string) error
}

// FederationClient implements FederationAPI on a gRPC connection.
type FederationClient struct {
	api     trustdomainv1.TrustDomainClient
	timeout time.Duration
	metrics *Metrics
	guard   WriteGuard
	reads   atomic.Int64
	writes  atomic.Int64
}

var _ FederationAPI = &FederationClient{}

// Reads returns how many relationship reads the client has made.
func (c *FederationClient) Reads() int64 { return c.reads.Load() }

// Writes returns how many relationship writes (create, update, delete) the
// client has made.
func (c *FederationClient) Writes() int64 { return c.writes.Load() }

// NewFederationClient returns a FederationClient on conn; Timeout,
// Metrics and WriteGuard of opts apply (a write the guard refuses is not
// sent and fails as Unavailable, as the entry client's do).
func NewFederationClient(conn grpc.ClientConnInterface, opts Options) *FederationClient {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultOptions().Timeout
	}
	return &FederationClient{api: trustdomainv1.NewTrustDomainClient(conn), timeout: opts.Timeout, metrics: opts.Metrics, guard: opts.WriteGuard}
}

// call runs one RPC with the timeout and records it.
func (c *FederationClient) call(ctx context.Context, method string, rpc func(ctx context.Context) error) error {
	var (
		rctx   context.Context
		cancel context.CancelFunc
	)
	if strings.HasPrefix(method, "Batch") {
		var err error
		if rctx, cancel, err = writeContext(ctx, c.guard, method, c.timeout); err != nil {
			return err
		}
		c.writes.Add(1)
	} else {
		rctx, cancel = context.WithTimeout(ctx, c.timeout)
		c.reads.Add(1)
	}
	defer cancel()
	start := time.Now()
	err := rpc(rctx)
	if c.metrics != nil {
		c.metrics.rpcs.WithLabelValues(method, status.Code(err).String()).Inc()
		c.metrics.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
	}
	return err
}

// Get reads the relationship with GetFederationRelationship.
func (c *FederationClient) Get(ctx context.Context, trustDomain string) (*types.FederationRelationship, error) {
	var out *types.FederationRelationship
	err := c.call(ctx, "GetFederationRelationship", func(ctx context.Context) (err error) {
		out, err = c.api.GetFederationRelationship(ctx, &trustdomainv1.GetFederationRelationshipRequest{TrustDomain: trustDomain})
		return err
	})
	switch status.Code(err) {
	case codes.OK:
		return out, nil
	case codes.NotFound:
		return nil, nil
	}
	return nil, fmt.Errorf("get federation relationship %s: %w", trustDomain, err)
}

// Create creates the relationship with BatchCreateFederationRelationship.
func (c *FederationClient) Create(ctx context.Context, r *types.FederationRelationship) error {
	var resp *trustdomainv1.BatchCreateFederationRelationshipResponse
	err := c.call(ctx, "BatchCreateFederationRelationship", func(ctx context.Context) (err error) {
		resp, err = c.api.BatchCreateFederationRelationship(ctx, &trustdomainv1.BatchCreateFederationRelationshipRequest{
			FederationRelationships: []*types.FederationRelationship{r},
		})
		return err
	})
	return itemError("create", r.GetTrustDomain(), err, resp.GetResults())
}

// Update updates the relationship with BatchUpdateFederationRelationship.
func (c *FederationClient) Update(ctx context.Context, r *types.FederationRelationship, mask *types.FederationRelationshipMask) error {
	var resp *trustdomainv1.BatchUpdateFederationRelationshipResponse
	err := c.call(ctx, "BatchUpdateFederationRelationship", func(ctx context.Context) (err error) {
		resp, err = c.api.BatchUpdateFederationRelationship(ctx, &trustdomainv1.BatchUpdateFederationRelationshipRequest{
			FederationRelationships: []*types.FederationRelationship{r}, InputMask: mask,
		})
		return err
	})
	return itemError("update", r.GetTrustDomain(), err, resp.GetResults())
}

// Delete deletes the relationship with BatchDeleteFederationRelationship.
func (c *FederationClient) Delete(ctx context.Context, trustDomain string) error {
	var resp *trustdomainv1.BatchDeleteFederationRelationshipResponse
	err := c.call(ctx, "BatchDeleteFederationRelationship", func(ctx context.Context) (err error) {
		resp, err = c.api.BatchDeleteFederationRelationship(ctx, &trustdomainv1.BatchDeleteFederationRelationshipRequest{
			TrustDomains: []string{trustDomain},
		})
		return err
	})
	res := resp.GetResults()
	if err == nil && len(res) == 1 && codes.Code(res[0].GetStatus().GetCode()) == codes.NotFound {
		return nil
	}
	return itemError("delete", trustDomain, err, res)
}

// itemError returns the error of a one-item batch call: the RPC's, or the
// item's status as a gRPC status error.
func itemError[R batchResult](verb, trustDomain string, err error, results []R) error {
	if err != nil {
		return fmt.Errorf("%s federation relationship %s: %w", verb, trustDomain, err)
	}
	if len(results) != 1 {
		return fmt.Errorf("%s federation relationship %s: %w", verb, trustDomain,
			status.Errorf(codes.Internal, "SPIRE returned %d results for 1 relationship", len(results)))
	}
	st := results[0].GetStatus()
	if code := codes.Code(st.GetCode()); code != codes.OK {
		return fmt.Errorf("%s federation relationship %s: %w", verb, trustDomain, status.Error(code, st.GetMessage()))
	}
	return nil
}

// FederationDryRun is a FederationAPI that reads through to SPIRE and
// writes nothing: each write is logged, counted in
// trustplane_spire_dry_run_writes_total and answered as a success.
type FederationDryRun struct {
	api     FederationAPI
	log     logr.Logger
	metrics *Metrics
}

var _ FederationAPI = (*FederationDryRun)(nil)

// NewFederationDryRun returns a FederationDryRun reading through api;
// metrics may be nil.
func NewFederationDryRun(api FederationAPI, log logr.Logger, metrics *Metrics) *FederationDryRun {
	return &FederationDryRun{api: api, log: log, metrics: metrics}
}

// Get implements FederationAPI.
func (d *FederationDryRun) Get(ctx context.Context, trustDomain string) (*types.FederationRelationship, error) {
	return d.api.Get(ctx, trustDomain)
}

// Create implements FederationAPI: it creates nothing.
func (d *FederationDryRun) Create(_ context.Context, r *types.FederationRelationship) error {
	d.log.Info("dry run: would create federation relationship", "trustDomain", r.GetTrustDomain(), "bundleEndpointURL", r.GetBundleEndpointUrl())
	d.metrics.dryRun("BatchCreateFederationRelationship", 1)
	return nil
}

// Update implements FederationAPI: it updates nothing.
func (d *FederationDryRun) Update(_ context.Context, r *types.FederationRelationship, mask *types.FederationRelationshipMask) error {
	d.log.Info("dry run: would update federation relationship", "trustDomain", r.GetTrustDomain(), "mask", mask.String())
	d.metrics.dryRun("BatchUpdateFederationRelationship", 1)
	return nil
}

// Delete implements FederationAPI: it deletes nothing.
func (d *FederationDryRun) Delete(_ context.Context, trustDomain string) error {
	d.log.Info("dry run: would delete federation relationship", "trustDomain", trustDomain)
	d.metrics.dryRun("BatchDeleteFederationRelationship", 1)
	return nil
}
