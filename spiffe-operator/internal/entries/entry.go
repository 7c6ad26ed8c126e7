package entries

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"unique"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
)

// Selector is one SPIRE selector, e.g. {Type: "k8s", Value: "ns:prod"}.
type Selector struct {
	// Type is the selector type, e.g. k8s.
	Type string
	// Value is the selector value, e.g. ns:prod.
	Value string
}

// String returns "type:value".
func (s Selector) String() string { return s.Type + ":" + s.Value }

// ParseSelector parses "type:value".
func ParseSelector(s string) (Selector, error) {
	t, v, ok := strings.Cut(s, ":")
	if !ok || t == "" || v == "" {
		return Selector{}, fmt.Errorf("selector %q is not of the form type:value", s)
	}
	return Selector{Type: t, Value: v}, nil
}

// Entry is a SPIRE entry as the operator wants it. Build it with Normalize
// so that slices are sorted and free of duplicates.
type Entry struct {
	// SpiffeID is the identity issued.
	SpiffeID spiffeid.ID
	// ParentID is the agent or node alias that may issue it.
	ParentID spiffeid.ID
	// Selectors must all match a workload.
	Selectors []Selector
	// X509SVIDTTL in seconds; 0 is the server default.
	X509SVIDTTL int32
	// JWTSVIDTTL in seconds; 0 is the server default.
	JWTSVIDTTL int32
	// DNSNames are DNS SANs.
	DNSNames []string
	// FederatesWith are trust domain names.
	FederatesWith []string
	// Hint tells SVIDs apart.
	Hint string
	// Admin grants admin access to the server APIs.
	Admin bool
	// Downstream makes the workload a downstream server.
	Downstream bool

	// key caches Key(); Normalize sets it.
	key Key
}

// Normalize sorts and de-duplicates the slices of e and caches its key.
// Call it again after changing the SPIFFE ID, parent ID or selectors.
func (e *Entry) Normalize() {
	slices.SortFunc(e.Selectors, compareSelectors)
	e.Selectors = slices.Compact(e.Selectors)
	e.DNSNames = sortedSet(e.DNSNames)
	e.FederatesWith = sortedSet(e.FederatesWith)
	e.key = e.computeKey()
}

func compareSelectors(a, b Selector) int {
	if c := strings.Compare(a.Type, b.Type); c != 0 {
		return c
	}
	return strings.Compare(a.Value, b.Value)
}

func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

// Key identifies an entry the way SPIRE does when it refuses a "similar
// entry": parent ID, SPIFFE ID and selector set. It is an 80-bit digest of
// their canonical form, short enough to be a cheap map key and part of the
// entry ID.
type Key string

// Key returns the identity of e; e must be normalized.
func (e *Entry) Key() Key {
	if e.key != "" {
		return e.key
	}
	return e.computeKey()
}

// KeyHash returns the key as a string, for entry IDs.
func (e *Entry) KeyHash() string { return string(e.Key()) }

// Hash returns k as a string, for entry IDs.
func (k Key) Hash() string { return string(k) }

func (e *Entry) computeKey() Key {
	h := sha256.New()
	_, _ = io.WriteString(h, e.ParentID.String())
	for _, s := range append([]string{e.SpiffeID.String()}, selectorStrings(e.Selectors)...) {
		_, _ = h.Write([]byte{0})
		_, _ = io.WriteString(h, s)
	}
	var sum [sha256.Size]byte
	return Key(hex.EncodeToString(h.Sum(sum[:0])[:10]))
}

func selectorStrings(sels []Selector) []string {
	out := make([]string, len(sels))
	for i, s := range sels {
		out[i] = s.String()
	}
	return out
}

// WithoutGrants returns a copy of e without what an owner grants its
// workloads beyond the identity itself: SPIRE admin, downstream, DNS names
// and federated trust domains. The key, TTLs and hint stay.
func (e *Entry) WithoutGrants() Entry {
	out := *e
	out.Admin, out.Downstream = false, false
	out.DNSNames, out.FederatesWith = nil, nil
	return out
}

// Grants are the rights an owner may give its entries beyond the identity
// itself and may withdraw again: SPIRE admin, downstream, and trust with
// federated trust domains. DNS names are not among them: they name the
// workload, and a failed render cannot say which it would have now.
type Grants struct {
	// Admin grants admin access to the server APIs.
	Admin bool
	// Downstream makes the workload a downstream server.
	Downstream bool
	// FederatesWith are the trust domain names whose bundles the
	// workload's SVIDs carry.
	FederatesWith []string
}

// Grants returns the grants e carries.
func (e *Entry) Grants() Grants {
	return Grants{Admin: e.Admin, Downstream: e.Downstream, FederatesWith: e.FederatesWith}
}

// Covers reports whether g makes every grant o makes.
func (g Grants) Covers(o Grants) bool {
	return (g.Admin || !o.Admin) && (g.Downstream || !o.Downstream) &&
		!slices.ContainsFunc(o.FederatesWith, func(td string) bool { return !slices.Contains(g.FederatesWith, td) })
}

// Within returns a copy of e that keeps only the grants g also makes: admin
// and downstream only if g sets them too, and only the federated trust
// domains g names. It never adds a grant, and the rest of e stays. An entry
// kept for continuity (a failed render's last good entry, one kept while
// its pods run) keeps its identity this way, never a grant withdrawn since.
func (e *Entry) Within(g Grants) Entry {
	out := *e
	out.Admin = e.Admin && g.Admin
	out.Downstream = e.Downstream && g.Downstream
	out.FederatesWith = nil
	for _, td := range e.FederatesWith {
		if slices.Contains(g.FederatesWith, td) {
			out.FederatesWith = append(out.FederatesWith, td)
		}
	}
	return out
}

// Proto returns e as a SPIRE entry with the given ID.
func (e *Entry) Proto(id string) *types.Entry {
	sels := make([]*types.Selector, len(e.Selectors))
	for i, s := range e.Selectors {
		sels[i] = &types.Selector{Type: s.Type, Value: s.Value}
	}
	return &types.Entry{
		Id:            id,
		SpiffeId:      idProto(e.SpiffeID),
		ParentId:      idProto(e.ParentID),
		Selectors:     sels,
		X509SvidTtl:   e.X509SVIDTTL,
		JwtSvidTtl:    e.JWTSVIDTTL,
		DnsNames:      slices.Clone(e.DNSNames),
		FederatesWith: slices.Clone(e.FederatesWith),
		Hint:          e.Hint,
		Admin:         e.Admin,
		Downstream:    e.Downstream,
	}
}

func idProto(id spiffeid.ID) *types.SPIFFEID {
	return &types.SPIFFEID{TrustDomain: id.TrustDomain().Name(), Path: id.Path()}
}

// FromProto converts a SPIRE entry, normalized.
func FromProto(p *types.Entry) (Entry, error) {
	spiffeID, err := idFromProto(p.GetSpiffeId())
	if err != nil {
		return Entry{}, fmt.Errorf("entry %s: spiffe ID: %w", p.GetId(), err)
	}
	parentID, err := idFromProto(p.GetParentId())
	if err != nil {
		return Entry{}, fmt.Errorf("entry %s: parent ID: %w", p.GetId(), err)
	}
	// Many entries share a parent ID, selector types and a namespace
	// selector (an agent's, a namespace's): one copy of each such string
	// serves them all (interning strings most entries do not share would
	// cost more than it saves).
	if parentID, err = spiffeid.FromString(unique.Make(parentID.String()).Value()); err != nil {
		return Entry{}, fmt.Errorf("entry %s: parent ID: %w", p.GetId(), err)
	}
	e := Entry{
		SpiffeID:      spiffeID,
		ParentID:      parentID,
		X509SVIDTTL:   p.GetX509SvidTtl(),
		JWTSVIDTTL:    p.GetJwtSvidTtl(),
		DNSNames:      slices.Clone(p.GetDnsNames()),
		FederatesWith: slices.Clone(p.GetFederatesWith()),
		Hint:          p.GetHint(),
		Admin:         p.GetAdmin(),
		Downstream:    p.GetDownstream(),
	}
	for _, s := range p.GetSelectors() {
		sel := Selector{Type: unique.Make(s.GetType()).Value(), Value: s.GetValue()}
		if strings.HasPrefix(sel.Value, "ns:") {
			sel.Value = unique.Make(sel.Value).Value()
		}
		e.Selectors = append(e.Selectors, sel)
	}
	e.Normalize()
	return e, nil
}

// ParentIDOf returns the parent ID of p, without converting the rest of
// the entry as FromProto does.
func ParentIDOf(p *types.Entry) (spiffeid.ID, error) { return idFromProto(p.GetParentId()) }

func idFromProto(p *types.SPIFFEID) (spiffeid.ID, error) {
	if p == nil {
		return spiffeid.ID{}, fmt.Errorf("missing")
	}
	td, err := spiffeid.TrustDomainFromString(p.GetTrustDomain())
	if err != nil {
		return spiffeid.ID{}, err
	}
	return spiffeid.FromPath(td, p.GetPath())
}

// UpdateMask compares the wanted entry with the actual one and returns the
// mask of the fields that differ, or nil when they are equal. Both must be
// normalized. Only fields set in the mask are sent, so fields the operator
// does not manage (expiry, storeSvid) are never cleared.
func UpdateMask(want, have *Entry) *types.EntryMask {
	m := types.EntryMask{
		SpiffeId:      want.SpiffeID != have.SpiffeID,
		ParentId:      want.ParentID != have.ParentID,
		Selectors:     !slices.Equal(want.Selectors, have.Selectors),
		X509SvidTtl:   want.X509SVIDTTL != have.X509SVIDTTL,
		JwtSvidTtl:    want.JWTSVIDTTL != have.JWTSVIDTTL,
		DnsNames:      !slices.Equal(want.DNSNames, have.DNSNames),
		FederatesWith: !slices.Equal(want.FederatesWith, have.FederatesWith),
		Hint:          want.Hint != have.Hint,
		Admin:         want.Admin != have.Admin,
		Downstream:    want.Downstream != have.Downstream,
	}
	if !(m.SpiffeId || m.ParentId || m.Selectors || m.X509SvidTtl || m.JwtSvidTtl ||
		m.DnsNames || m.FederatesWith || m.Hint || m.Admin || m.Downstream) {
		return nil
	}
	return &m
}

// MaskString names the fields of m, for logs and grouping.
func MaskString(m *types.EntryMask) string {
	var f []string
	add := func(set bool, name string) {
		if set {
			f = append(f, name)
		}
	}
	add(m.SpiffeId, "spiffeId")
	add(m.ParentId, "parentId")
	add(m.Selectors, "selectors")
	add(m.X509SvidTtl, "x509SvidTtl")
	add(m.JwtSvidTtl, "jwtSvidTtl")
	add(m.DnsNames, "dnsNames")
	add(m.FederatesWith, "federatesWith")
	add(m.Hint, "hint")
	add(m.Admin, "admin")
	add(m.Downstream, "downstream")
	return strings.Join(f, ",")
}
