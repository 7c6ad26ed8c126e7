// Package fake is an in-memory stand-in for the SPIRE Entry API with the
// semantics the operator relies on (custom entry IDs, "similar entry"
// AlreadyExists, masked updates) and switches for faults a real server
// cannot produce on demand. Unit tests use it; integration tests use a real
// spire-server.
package fake

import (
	"context"
	"fmt"
	"sync"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// EntryAPI is an in-memory spire.EntryAPI.
type EntryAPI struct {
	mu      sync.Mutex
	entries map[string]*types.Entry
	byKey   map[entries.Key]string
	next    int
	// Unavailable makes every call fail with codes.Unavailable.
	Unavailable bool
	// Reject makes creates and updates of these SPIFFE IDs fail with
	// InvalidArgument.
	Reject map[string]bool
	// MissingBundles makes creates and updates of entries federating with
	// these trust domains fail as SPIRE's SQL datastore fails them when it
	// holds no bundle of the trust domain (code Internal).
	MissingBundles map[string]bool
	// Fail makes creates of these SPIFFE IDs fail with the given per-entry
	// code (SPIRE answers Internal for a datastore error), the call itself
	// succeeding.
	Fail map[string]codes.Code
	// FailOnce is Fail for the next create of each SPIFFE ID only.
	FailOnce map[string]codes.Code
	// FailDelete makes deletes of the entries of these SPIFFE IDs fail
	// with the given per-entry code, the call itself succeeding.
	FailDelete map[string]codes.Code
	// IgnoreIDs makes creates store entries under IDs of the fake's own, as
	// SPIRE before 1.8 did with the IDs it was given.
	IgnoreIDs bool
	// Calls counts calls by method.
	Calls map[string]int
	// Log records successful writes in order: "create <id>", "update <id>", "delete <id>".
	Log []string
}

var _ spire.EntryAPI = &EntryAPI{}

// New returns an empty EntryAPI.
func New() *EntryAPI {
	return &EntryAPI{entries: map[string]*types.Entry{}, byKey: map[entries.Key]string{}, Reject: map[string]bool{}, MissingBundles: map[string]bool{}, FailOnce: map[string]codes.Code{}, Fail: map[string]codes.Code{}, FailDelete: map[string]codes.Code{}, Calls: map[string]int{}}
}

func (f *EntryAPI) call(m string) error {
	f.Calls[m]++
	if f.Unavailable {
		return status.Error(codes.Unavailable, "fake SPIRE is down")
	}
	return nil
}

// Put stores e as is (a foreign or hand-made entry); an empty ID gets one.
func (f *EntryAPI) Put(e *types.Entry) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	e = proto.Clone(e).(*types.Entry)
	if e.Id == "" {
		f.next++
		e.Id = fmt.Sprintf("foreign-%d", f.next)
	}
	f.store(e)
	return e.Id
}

// Get returns a copy of the entry with id, or nil.
func (f *EntryAPI) Get(id string) *types.Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.entries[id]; ok {
		return proto.Clone(e).(*types.Entry)
	}
	return nil
}

// Remove deletes an entry behind the operator's back.
func (f *EntryAPI) Remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.entries[id]; ok {
		f.drop(e)
	}
}

// All returns copies of every entry.
func (f *EntryAPI) All() []*types.Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*types.Entry, 0, len(f.entries))
	for _, e := range f.entries {
		out = append(out, proto.Clone(e).(*types.Entry))
	}
	return out
}

// ListByParent implements spire.EntryAPI.
func (f *EntryAPI) ListByParent(_ context.Context, parent spiffeid.ID) ([]*types.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ListEntries"); err != nil {
		return nil, err
	}
	var out []*types.Entry
	for _, e := range f.entries {
		if e.ParentId.TrustDomain == parent.TrustDomain().Name() && e.ParentId.Path == parent.Path() {
			out = append(out, proto.Clone(e).(*types.Entry))
		}
	}
	return out, nil
}

// ListAll implements spire.EntryAPI.
func (f *EntryAPI) ListAll(_ context.Context) ([]*types.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("ListEntries"); err != nil {
		return nil, err
	}
	out := make([]*types.Entry, 0, len(f.entries))
	for _, e := range f.entries {
		out = append(out, proto.Clone(e).(*types.Entry))
	}
	return out, nil
}

func keyOf(e *types.Entry) entries.Key {
	x, err := entries.FromProto(e)
	if err != nil {
		return ""
	}
	return x.Key()
}

// Create implements spire.EntryAPI.
func (f *EntryAPI) Create(_ context.Context, in []*types.Entry) ([]spire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]spire.Result, len(in))
	if err := f.call("BatchCreateEntry"); err != nil {
		for i := range out {
			out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
		}
		return out, err
	}
	for i, e := range in {
		if f.Reject["spiffe://"+e.SpiffeId.TrustDomain+e.SpiffeId.Path] {
			out[i] = spire.Result{Code: codes.InvalidArgument, Message: "failed to convert entry: rejected by fake"}
			continue
		}
		if r, ok := f.missingBundle(e.FederatesWith); ok {
			out[i] = r
			continue
		}
		existing := f.entries[e.Id]
		if existing != nil && keyOf(existing) != keyOf(e) {
			// As spire-server's SQL datastore answers: the ID is taken by
			// another entry, which it does not return.
			out[i] = spire.Result{Code: codes.AlreadyExists,
				Message: "failed to create entry: datastore-sql: UNIQUE constraint failed: registered_entries.entry_id"}
			continue
		}
		if existing == nil {
			existing = f.similar(keyOf(e))
		}
		if existing != nil {
			out[i] = spire.Result{Code: codes.AlreadyExists, Message: "similar entry already exists", Entry: proto.Clone(existing).(*types.Entry)}
			continue
		}
		// A datastore error comes with the write, after SPIRE found no
		// entry like it.
		if c, ok := f.FailOnce["spiffe://"+e.SpiffeId.TrustDomain+e.SpiffeId.Path]; ok {
			delete(f.FailOnce, "spiffe://"+e.SpiffeId.TrustDomain+e.SpiffeId.Path)
			out[i] = spire.Result{Code: c, Message: "failed to create entry: datastore error (fake)"}
			continue
		}
		if c, ok := f.Fail["spiffe://"+e.SpiffeId.TrustDomain+e.SpiffeId.Path]; ok {
			out[i] = spire.Result{Code: c, Message: "failed to create entry: datastore error (fake)"}
			continue
		}
		e = proto.Clone(e).(*types.Entry)
		if f.IgnoreIDs {
			f.next++
			e.Id = fmt.Sprintf("server-made-%d", f.next)
		}
		f.store(e)
		f.Log = append(f.Log, "create "+e.Id)
		out[i] = spire.Result{Code: codes.OK, Entry: proto.Clone(e).(*types.Entry)}
	}
	return out, nil
}

// missingBundle returns the result SPIRE gives an entry federating with
// tds when it lacks the bundle of one of them.
func (f *EntryAPI) missingBundle(tds []string) (spire.Result, bool) {
	for _, td := range tds {
		if f.MissingBundles[td] {
			return spire.Result{Code: codes.Internal, Message: "failed to create entry: unable to find federated bundle \"spiffe://" + td + "\""}, true
		}
	}
	return spire.Result{}, false
}

// similar returns the entry with key k, or nil.
func (f *EntryAPI) similar(k entries.Key) *types.Entry {
	return f.entries[f.byKey[k]]
}

func (f *EntryAPI) store(e *types.Entry) {
	if old, ok := f.entries[e.Id]; ok {
		f.drop(old)
	}
	f.entries[e.Id] = e
	f.byKey[keyOf(e)] = e.Id
}

func (f *EntryAPI) drop(e *types.Entry) {
	if k := keyOf(e); f.byKey[k] == e.Id {
		delete(f.byKey, k)
	}
	delete(f.entries, e.Id)
}

// Update implements spire.EntryAPI, applying only the masked fields.
func (f *EntryAPI) Update(_ context.Context, in []*types.Entry, m *types.EntryMask) ([]spire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]spire.Result, len(in))
	if err := f.call("BatchUpdateEntry"); err != nil {
		for i := range out {
			out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
		}
		return out, err
	}
	for i, e := range in {
		x, ok := f.entries[e.Id]
		if !ok {
			out[i] = spire.Result{Code: codes.NotFound, Message: "entry not found"}
			continue
		}
		if id := x.SpiffeId; f.Reject["spiffe://"+id.TrustDomain+id.Path] {
			out[i] = spire.Result{Code: codes.InvalidArgument, Message: "failed to convert entry: rejected by fake"}
			continue
		}
		if m == nil || m.FederatesWith {
			if r, ok := f.missingBundle(e.FederatesWith); ok {
				out[i] = r
				continue
			}
		}
		f.drop(x)
		if m == nil || m.SpiffeId {
			x.SpiffeId = e.SpiffeId
		}
		if m == nil || m.ParentId {
			x.ParentId = e.ParentId
		}
		if m == nil || m.Selectors {
			x.Selectors = e.Selectors
		}
		if m == nil || m.X509SvidTtl {
			x.X509SvidTtl = e.X509SvidTtl
		}
		if m == nil || m.JwtSvidTtl {
			x.JwtSvidTtl = e.JwtSvidTtl
		}
		if m == nil || m.DnsNames {
			x.DnsNames = e.DnsNames
		}
		if m == nil || m.FederatesWith {
			x.FederatesWith = e.FederatesWith
		}
		if m == nil || m.Hint {
			x.Hint = e.Hint
		}
		if m == nil || m.Admin {
			x.Admin = e.Admin
		}
		if m == nil || m.Downstream {
			x.Downstream = e.Downstream
		}
		f.store(x)
		f.Log = append(f.Log, "update "+e.Id)
		out[i] = spire.Result{Code: codes.OK, Entry: proto.Clone(x).(*types.Entry)}
	}
	return out, nil
}

// Delete implements spire.EntryAPI.
func (f *EntryAPI) Delete(_ context.Context, ids []string) ([]spire.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]spire.Result, len(ids))
	if err := f.call("BatchDeleteEntry"); err != nil {
		for i := range out {
			out[i] = spire.Result{Code: codes.Unavailable, Message: err.Error()}
		}
		return out, err
	}
	for i, id := range ids {
		e, ok := f.entries[id]
		if !ok {
			out[i] = spire.Result{Code: codes.NotFound}
			continue
		}
		if c, ok := f.FailDelete["spiffe://"+e.SpiffeId.TrustDomain+e.SpiffeId.Path]; ok {
			out[i] = spire.Result{Code: c, Message: "fake SPIRE refuses to delete it"}
			continue
		}
		f.drop(e)
		f.Log = append(f.Log, "delete "+id)
		out[i] = spire.Result{Code: codes.OK}
	}
	return out, nil
}

// Exists implements spire.EntryAPI.
func (f *EntryAPI) Exists(_ context.Context, id string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("GetEntry"); err != nil {
		return false, err
	}
	_, ok := f.entries[id]
	return ok, nil
}

// SetUnavailable switches the outage fault.
func (f *EntryAPI) SetUnavailable(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Unavailable = down
}

// Writes returns a copy of the write log.
func (f *EntryAPI) Writes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.Log...)
}

// CallCount returns how many calls of method were made.
func (f *EntryAPI) CallCount(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Calls[method]
}
