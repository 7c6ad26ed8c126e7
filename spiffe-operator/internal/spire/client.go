package spire

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Result is the outcome of one entry in a batch call.
type Result struct {
	// Code is the per-entry gRPC code; codes.OK on success.
	Code codes.Code
	// Message is SPIRE's message for a failure.
	Message string
	// Entry is the entry SPIRE returned: the created or updated one, or the
	// existing one for AlreadyExists.
	Entry *types.Entry
}

// EntryAPI is what the operator needs from the SPIRE Entry API. Each batch
// method returns one Result per input, in order; a non-nil error means some
// batches did not reach SPIRE (their results carry the RPC's code).
type EntryAPI interface {
	// ListByParent returns every entry under parent.
	ListByParent(ctx context.Context, parent spiffeid.ID) ([]*types.Entry, error)
	// ListAll returns every entry of the server.
	ListAll(ctx context.Context) ([]*types.Entry, error)
	// Create creates entries.
	Create(ctx context.Context, entries []*types.Entry) ([]Result, error)
	// Update updates entries, sending only the fields in mask.
	Update(ctx context.Context, entries []*types.Entry, mask *types.EntryMask) ([]Result, error)
	// Delete deletes entries by ID.
	Delete(ctx context.Context, ids []string) ([]Result, error)
	// Exists reports whether an entry with the ID exists.
	Exists(ctx context.Context, id string) (bool, error)
}

// Options tune a Client.
type Options struct {
	// PageSize is the ListEntries page size.
	PageSize int32
	// BatchSize caps the entries of one batch call (SPIRE's limit is 50).
	BatchSize int
	// MaxBatchBytes caps the encoded size of one batch request, under gRPC's
	// default 4 MiB message limit.
	MaxBatchBytes int
	// MaxReceiveBytes is the largest ListEntries reply the client accepts
	// (gRPC's default is 4 MiB, which 1,000 entries with many DNS names
	// exceed). A page over it is asked for again at half the page size.
	MaxReceiveBytes int
	// Concurrency is how many batch calls may be in flight at once.
	Concurrency int
	// Timeout bounds each RPC.
	Timeout time.Duration
	// Metrics records RPCs; nil disables metrics.
	Metrics *Metrics
	// WriteGuard, when set, is asked before every batch call: an error
	// (a replica that may no longer hold its leader election lease)
	// fails the call as Unavailable, without sending it, and the deadline
	// it gives bounds the call.
	WriteGuard WriteGuard
}

// WriteGuard says whether a write may go out now, and by when it must have
// landed (manager.LeaseGuard.Deadline): a replica that may no longer hold
// its leader election lease must not write, and a write it sent while it
// did must not land after another replica could lead.
type WriteGuard func() (time.Time, error)

// writeContext asks guard (nil allows every write) whether the write
// method may go out, and returns ctx bounded by timeout and by the guard's
// deadline. A refusal is an Unavailable error.
func writeContext(ctx context.Context, guard WriteGuard, method string, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	if guard == nil {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		return ctx, cancel, nil
	}
	deadline, err := guard()
	if err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "%s not sent: %v", method, err)
	}
	bounded, cancelDeadline := context.WithDeadline(ctx, deadline)
	timed, cancelTimeout := context.WithTimeout(bounded, timeout)
	return timed, func() { cancelTimeout(); cancelDeadline() }, nil
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options {
	return Options{PageSize: 1000, BatchSize: 50, MaxBatchBytes: 3 << 20, MaxReceiveBytes: 32 << 20, Concurrency: 1, Timeout: 30 * time.Second}
}

// Client implements EntryAPI on a gRPC connection.
type Client struct {
	entries entryv1.EntryClient
	opts    Options
	calls   atomic.Int64
}

var _ EntryAPI = &Client{}

// NewClient returns a Client on conn.
func NewClient(conn grpc.ClientConnInterface, opts Options) *Client {
	d := DefaultOptions()
	if opts.PageSize <= 0 {
		opts.PageSize = d.PageSize
	}
	if opts.BatchSize <= 0 || opts.BatchSize > 50 {
		opts.BatchSize = d.BatchSize
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = d.MaxBatchBytes
	}
	if opts.MaxReceiveBytes <= 0 {
		opts.MaxReceiveBytes = d.MaxReceiveBytes
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.Timeout <= 0 {
		opts.Timeout = d.Timeout
	}
	return &Client{entries: entryv1.NewEntryClient(conn), opts: opts}
}

// Calls returns how many RPCs the client has made, for benchmarks.
func (c *Client) Calls() int64 { return c.calls.Load() }

func (c *Client) observe(method string, start time.Time, err error) {
	c.calls.Add(1)
	m := c.opts.Metrics
	if m == nil {
		return
	}
	m.rpcs.WithLabelValues(method, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

func (c *Client) observeResult(method string, code codes.Code) {
	if c.opts.Metrics != nil {
		c.opts.Metrics.results.WithLabelValues(method, code.String()).Inc()
	}
}

// ListByParent pages through ListEntries filtered by parent ID.
func (c *Client) ListByParent(ctx context.Context, parent spiffeid.ID) ([]*types.Entry, error) {
	filter := &entryv1.ListEntriesRequest_Filter{
		ByParentId: &types.SPIFFEID{TrustDomain: parent.TrustDomain().Name(), Path: parent.Path()},
	}
	out, err := c.list(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("list entries under %s: %w", parent, err)
	}
	return out, nil
}

// ListAll pages through ListEntries without a filter.
func (c *Client) ListAll(ctx context.Context) ([]*types.Entry, error) {
	out, err := c.list(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list all entries: %w", err)
	}
	return out, nil
}

// list pages through ListEntries. A page larger than MaxReceiveBytes
// (ResourceExhausted) is asked for again at half the page size, down to one
// entry per page.
func (c *Client) list(ctx context.Context, filter *entryv1.ListEntriesRequest_Filter) ([]*types.Entry, error) {
	var (
		out      []*types.Entry
		token    string
		pageSize = c.opts.PageSize
	)
	for {
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		resp, err := c.entries.ListEntries(rctx, &entryv1.ListEntriesRequest{
			Filter: filter, PageSize: pageSize, PageToken: token,
		}, grpc.MaxCallRecvMsgSize(c.opts.MaxReceiveBytes))
		cancel()
		c.observe("ListEntries", start, err)
		if status.Code(err) == codes.ResourceExhausted && pageSize > 1 {
			pageSize /= 2
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("page size %d: %w", pageSize, err)
		}
		out = append(out, resp.GetEntries()...)
		token = resp.GetNextPageToken()
		if token == "" || len(resp.GetEntries()) == 0 {
			return out, nil
		}
	}
}

// Exists reads one entry with GetEntry.
func (c *Client) Exists(ctx context.Context, id string) (bool, error) {
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	_, err := c.entries.GetEntry(rctx, &entryv1.GetEntryRequest{Id: id, OutputMask: &types.EntryMask{}})
	c.observe("GetEntry", start, err)
	switch status.Code(err) {
	case codes.OK:
		return true, nil
	case codes.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("get entry %s: %w", id, err)
}

// Create creates entries with BatchCreateEntry.
func (c *Client) Create(ctx context.Context, in []*types.Entry) ([]Result, error) {
	return c.batch(ctx, "BatchCreateEntry", len(in), func(i int) int { return proto.Size(in[i]) },
		func(ctx context.Context, lo, hi int) ([]Result, error) {
			resp, err := c.entries.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: in[lo:hi]})
			if err != nil {
				return nil, err
			}
			return toResults(resp.GetResults()), nil
		})
}

// Update updates entries with BatchUpdateEntry and the given mask.
func (c *Client) Update(ctx context.Context, in []*types.Entry, mask *types.EntryMask) ([]Result, error) {
	return c.batch(ctx, "BatchUpdateEntry", len(in), func(i int) int { return proto.Size(in[i]) },
		func(ctx context.Context, lo, hi int) ([]Result, error) {
			resp, err := c.entries.BatchUpdateEntry(ctx, &entryv1.BatchUpdateEntryRequest{Entries: in[lo:hi], InputMask: mask})
			if err != nil {
				return nil, err
			}
			return toResults(resp.GetResults()), nil
		})
}

// Delete deletes entries with BatchDeleteEntry.
func (c *Client) Delete(ctx context.Context, ids []string) ([]Result, error) {
	return c.batch(ctx, "BatchDeleteEntry", len(ids), func(i int) int { return len(ids[i]) + 4 },
		func(ctx context.Context, lo, hi int) ([]Result, error) {
			resp, err := c.entries.BatchDeleteEntry(ctx, &entryv1.BatchDeleteEntryRequest{Ids: ids[lo:hi]})
			if err != nil {
				return nil, err
			}
			return toResults(resp.GetResults()), nil
		})
}

// batchResult is a per-item result of any of the three batch calls; create
// and update results also carry the entry.
type batchResult interface {
	GetStatus() *types.Status
}

// toResults converts the per-item results of a batch call.
func toResults[R batchResult](rs []R) []Result {
	out := make([]Result, len(rs))
	for i, r := range rs {
		out[i] = Result{Code: codes.Code(r.GetStatus().GetCode()), Message: r.GetStatus().GetMessage()}
		if withEntry, ok := any(r).(interface{ GetEntry() *types.Entry }); ok {
			out[i].Entry = withEntry.GetEntry()
		}
	}
	return out
}

// batch splits n items into calls of at most BatchSize items and
// MaxBatchBytes bytes, runs up to Concurrency of them at once, and returns
// one Result per item. Items of a failed call get the call's code. An item
// larger than MaxBatchBytes alone is not sent: it gets InvalidArgument, as
// if SPIRE had refused it, since SPIRE would refuse the whole call (over
// gRPC's message limit) and so fail the items sent with it.
func (c *Client) batch(ctx context.Context, method string, n int, size func(int) int,
	call func(ctx context.Context, lo, hi int) ([]Result, error)) ([]Result, error) {
	results := make([]Result, n)
	type span struct{ lo, hi int }
	var spans []span
	for lo := 0; lo < n; {
		if s := size(lo); s > c.opts.MaxBatchBytes {
			results[lo] = Result{Code: codes.InvalidArgument, Message: fmt.Sprintf(
				"not sent: the entry is %d bytes encoded, more than the %d bytes one request to SPIRE may carry; "+
					"it has too many DNS names (autoPopulateDNSNames adds one for each Service that selects its pods) or selectors", s, c.opts.MaxBatchBytes)}
			c.observeResult(method, codes.InvalidArgument)
			lo++
			continue
		}
		hi, bytes := lo, 0
		for hi < n && hi-lo < c.opts.BatchSize {
			s := size(hi)
			if s > c.opts.MaxBatchBytes || hi > lo && bytes+s > c.opts.MaxBatchBytes {
				break
			}
			bytes += s
			hi++
		}
		spans = append(spans, span{lo, hi})
		lo = hi
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, c.opts.Concurrency)
	)
	for _, sp := range spans {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := time.Now()
			var res []Result
			rctx, cancel, err := writeContext(ctx, c.opts.WriteGuard, method, c.opts.Timeout)
			if err == nil {
				res, err = call(rctx, sp.lo, sp.hi)
				cancel()
			}
			if err == nil && len(res) != sp.hi-sp.lo {
				err = status.Errorf(codes.Internal, "%s returned %d results for %d entries", method, len(res), sp.hi-sp.lo)
			}
			c.observe(method, start, err)
			if err != nil {
				code := status.Code(err)
				for i := sp.lo; i < sp.hi; i++ {
					results[i] = Result{Code: code, Message: err.Error()}
				}
				mu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("%s: %w", method, err)
				}
				mu.Unlock()
				return
			}
			for i, r := range res {
				c.observeResult(method, r.Code)
				results[sp.lo+i] = r
			}
		}()
	}
	wg.Wait()
	return results, firstErr
}
