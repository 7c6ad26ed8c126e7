package spifferegistration

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// maxKeptEntries caps status.keptEntries (the CRD's MaxItems), and
// maxKeptPerNamespace the records of one namespace: a workload beyond them
// keeps its last good entry in this process only.
// maxKeptRecordBytes caps the text of one record (its selectors, DNS names
// and IDs): a workload's matchLabels, which whoever may edit it chooses,
// become selectors, and a status too large for the API server would stop
// every status write of the policy.
const (
	maxKeptEntries      = 100
	maxKeptPerNamespace = 10
	maxKeptRecordBytes  = 2048
)

// keptRecord is a workload's last good entry as a status recorded it: the
// workload it belongs to (by UID) and the entry.
type keptRecord struct {
	uid   k8stypes.UID
	entry entries.Entry
	// registered is true when SPIRE holds the entry under the ID the
	// policy registers it with (entrysync.Syncer.Registered): the operator
	// wrote it, so the record is its own, whatever template made it.
	registered bool
}

// keptEntries returns the status records of the workloads of keys whose
// render fails and that keep a last good entry, ordered by kind, namespace
// and name. Of more than the caps allow, those recorded before (in prev)
// come first, then the others by kind, namespace and name; and no
// namespace has more than maxKeptPerNamespace. So whoever may create
// failing workloads in one namespace can neither displace another
// namespace's records nor fill the status.
func (m *policyRenders) keptEntries(keys iter.Seq[workloadKey], prev []v1alpha1.KeptEntry) []v1alpha1.KeptEntry {
	var all []v1alpha1.KeptEntry
	for k := range keys {
		r := m.byWorkload[k]
		if r == nil || r.failure == nil || r.lastGood == nil || r.uid == "" {
			continue
		}
		if rec := keptEntryOf(k, r.uid, r.lastGood); recordBytes(rec) <= maxKeptRecordBytes {
			all = append(all, rec)
		}
	}
	if len(all) == 0 {
		return nil
	}
	byName := func(a, b v1alpha1.KeptEntry) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	}
	before := make(map[workloadKey]k8stypes.UID, len(prev))
	for _, p := range prev {
		before[workloadKey{kind: p.Kind, namespace: p.Namespace, name: p.Name}] = p.UID
	}
	recordedBefore := func(r v1alpha1.KeptEntry) bool {
		uid, ok := before[workloadKey{kind: r.Kind, namespace: r.Namespace, name: r.Name}]
		return ok && uid == r.UID
	}
	slices.SortFunc(all, func(a, b v1alpha1.KeptEntry) int {
		pa, pb := recordedBefore(a), recordedBefore(b)
		if pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return byName(a, b)
	})
	out := make([]v1alpha1.KeptEntry, 0, min(len(all), maxKeptEntries))
	perNamespace := map[string]int{}
	for _, r := range all {
		if len(out) == maxKeptEntries {
			break
		}
		if perNamespace[r.Namespace] == maxKeptPerNamespace {
			continue
		}
		perNamespace[r.Namespace]++
		out = append(out, r)
	}
	slices.SortFunc(out, byName)
	return out
}

// recordBytes is the length of the text a record holds.
func recordBytes(r v1alpha1.KeptEntry) int {
	n := len(r.Kind) + len(r.Namespace) + len(r.Name) + len(r.UID) + len(r.SpiffeID) + len(r.ParentID) + len(r.Hint)
	for _, list := range [][]string{r.Selectors, r.DNSNames, r.FederatesWith} {
		for _, v := range list {
			n += len(v)
		}
	}
	return n
}

// keptEntryOf is the status record of workload k (UID uid) keeping e.
func keptEntryOf(k workloadKey, uid k8stypes.UID, e *entries.Entry) v1alpha1.KeptEntry {
	rec := v1alpha1.KeptEntry{
		Kind: k.kind, Namespace: k.namespace, Name: k.name, UID: uid,
		SpiffeID:    e.SpiffeID.String(),
		X509SVIDTTL: e.X509SVIDTTL, JWTSVIDTTL: e.JWTSVIDTTL, Hint: e.Hint,
		Admin: e.Admin, Downstream: e.Downstream,
	}
	// As the status reads back: an empty list is no list.
	if len(e.DNSNames) > 0 {
		rec.DNSNames = e.DNSNames
	}
	if len(e.FederatesWith) > 0 {
		rec.FederatesWith = e.FederatesWith
	}
	if !e.ParentID.IsZero() {
		rec.ParentID = e.ParentID.String()
	}
	rec.Selectors = make([]string, len(e.Selectors))
	for i, s := range e.Selectors {
		rec.Selectors[i] = s.String()
	}
	return rec
}

// parseKeptEntries returns the records of a status by workload. A record
// that does not convert to an entry of trust domain td, or that names no
// workload UID, is left out with the reason in err: the workload then
// keeps nothing after a restart, as before records were kept.
func parseKeptEntries(in []v1alpha1.KeptEntry, td spiffeid.TrustDomain) (map[workloadKey]keptRecord, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make(map[workloadKey]keptRecord, len(in))
	var errs []error
	for _, rec := range in {
		e, err := entryOfRecord(rec, td)
		if err == nil && rec.UID == "" {
			err = errors.New("no workload UID")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("status.keptEntries %s %s/%s: %w", rec.Kind, rec.Namespace, rec.Name, err))
			continue
		}
		out[workloadKey{kind: rec.Kind, namespace: rec.Namespace, name: rec.Name}] = keptRecord{uid: rec.UID, entry: e}
	}
	return out, errors.Join(errs...)
}

// entryOfRecord converts a status record back to the entry it recorded.
func entryOfRecord(rec v1alpha1.KeptEntry, td spiffeid.TrustDomain) (entries.Entry, error) {
	var e entries.Entry
	var err error
	if e.SpiffeID, err = spiffeid.FromString(rec.SpiffeID); err != nil {
		return e, fmt.Errorf("spiffeID: %w", err)
	}
	if e.SpiffeID.TrustDomain() != td {
		return e, fmt.Errorf("spiffeID %s is not in trust domain %s", e.SpiffeID, td)
	}
	if rec.ParentID != "" {
		if e.ParentID, err = spiffeid.FromString(rec.ParentID); err != nil {
			return e, fmt.Errorf("parentID: %w", err)
		}
	}
	for _, s := range rec.Selectors {
		sel, err := entries.ParseSelector(s)
		if err != nil {
			return e, err
		}
		e.Selectors = append(e.Selectors, sel)
	}
	if account, ok := entries.AccountOf(&e); !ok || !strings.HasPrefix(account, rec.Namespace+"/") {
		return e, fmt.Errorf("selectors %v do not select pods of namespace %q", rec.Selectors, rec.Namespace)
	}
	e.DNSNames, e.X509SVIDTTL, e.JWTSVIDTTL, e.Hint = rec.DNSNames, rec.X509SVIDTTL, rec.JWTSVIDTTL, rec.Hint
	e.Admin, e.Downstream, e.FederatesWith = rec.Admin, rec.Downstream, rec.FederatesWith
	e.Normalize()
	return e, nil
}

// couldHaveKept returns why rec, the record of w's last good entry in the
// policy's status, may not be taken as w's, or nil when it may. It must
// select w's namespace and service account, and either p could have
// rendered all of it for w (couldHaveRendered), or SPIRE holds it as the
// policy's own entry and it comes from a template changed since: p's
// template gives its SPIFFE ID to no other workload of w's namespace now
// (current; claimant), it selects w's pods by all of w's matchLabels or by
// no label at all (an account-wide entry), and its DNS names are ones p's
// templates could render for w (they are not part of the entry's ID).
func (p *policy) couldHaveKept(rec keptRecord, w workload.Workload, current *currentIDs) error {
	if err := selectsAccountOf(&rec.entry, w); err != nil {
		return err
	}
	rendered := p.couldHaveRendered(&rec.entry, w)
	if rendered == nil {
		return nil
	}
	if !rec.registered || current == nil {
		return fmt.Errorf("%w, and SPIRE does not hold it as the policy's", rendered)
	}
	// SPIRE holding the entry proves it the policy's, not this workload's:
	// another workload may have registered it.
	if who, ok := p.claimant(rec.entry.SpiffeID, w, current); ok {
		return fmt.Errorf("%w; SPIRE holds it as the policy's, but the policy's template gives that SPIFFE ID to %s", rendered, who)
	}
	if slices.ContainsFunc(rec.entry.Selectors, isPodLabel) {
		if err := selectsPodsOf(&rec.entry, w); err != nil {
			return fmt.Errorf("%w; SPIRE holds it as the policy's, but it selects other pods by their labels than the workload's", rendered)
		}
	}
	if !p.dnsNamesCouldRender(rec.entry.DNSNames, valuesOf(w)) {
		return fmt.Errorf("the policy's DNS name templates never render the recorded DNS names %v for this workload, one name each", rec.entry.DNSNames)
	}
	return nil
}

// isPodLabel reports whether s selects pods by a label.
func isPodLabel(s entries.Selector) bool {
	return s.Type == "k8s" && strings.HasPrefix(s.Value, entries.PodLabelPrefix)
}

// selectsAccountOf returns why e does not select the pods of w's namespace
// and service account, or nil when it does.
func selectsAccountOf(e *entries.Entry, w workload.Workload) error {
	if ns, sa, ok := entries.AccountParts(e); !ok || ns != w.Namespace || sa != w.ServiceAccount {
		return fmt.Errorf("the recorded entry does not select the pods of %s/%s", w.Namespace, w.ServiceAccount)
	}
	return nil
}

// selectsPodsOf returns why e does not select w's pods by each of w's
// matchLabels, or nil when it does.
func selectsPodsOf(e *entries.Entry, w workload.Workload) error {
	for k, v := range w.MatchLabels {
		if !slices.Contains(e.Selectors, entries.PodLabelSelector(k, v)) {
			return fmt.Errorf("the recorded entry does not select the workload's pods by its label %s=%s", k, v)
		}
	}
	return nil
}

// couldHaveRendered returns why e, an entry the policy's status records as
// w's last good entry, is not one p could have rendered for w, or nil when
// it could. A record written by someone other than the operator must name
// no identity, DNS name or pods that p never gives w, whatever labels w is
// given (its writer chooses them anyway; template.Matches):
//   - it selects w's namespace and service account, w's pods by their
//     matchLabels where p's entries must, and carries a selector that each
//     of p's selector templates could render (an image pinned stays pinned);
//   - its SPIFFE ID is one p's template could render;
//   - its DNS names are valid, and each is one a DNS name template of p
//     could render, no two from the same template.
//
// Grants, lifetimes, hint and parent follow the policy anyway (newRender).
func (p *policy) couldHaveRendered(e *entries.Entry, w workload.Workload) error {
	if err := selectsAccountOf(e, w); err != nil {
		return err
	}
	if p.podSelectors {
		if err := selectsPodsOf(e, w); err != nil {
			return err
		}
	}
	vals := valuesOf(w)
	for _, t := range p.selectors {
		if !slices.ContainsFunc(e.Selectors, func(s entries.Selector) bool { return t.Matches(s, vals) }) {
			return fmt.Errorf("the recorded entry has no selector the policy's selector template %q renders for this workload", t)
		}
	}
	if e.SpiffeID.TrustDomain() != p.trustDomain || !p.idTemplate.Matches(strings.TrimPrefix(e.SpiffeID.Path(), "/"), vals) {
		return fmt.Errorf("the policy's template never renders the recorded SPIFFE ID %s for this workload", e.SpiffeID)
	}
	if !p.dnsNamesCouldRender(e.DNSNames, vals) {
		return fmt.Errorf("the policy's DNS name templates never render the recorded DNS names %v for this workload, one name each", e.DNSNames)
	}
	return nil
}

// dnsNamesCouldRender reports whether each of names is a valid DNS name
// that a distinct DNS name template of p could render with vals: a
// template renders one name per workload.
func (p *policy) dnsNamesCouldRender(names []string, vals template.Values) bool {
	if len(names) > len(p.dnsNames) {
		return false
	}
	used := make([]bool, len(p.dnsNames))
	var assign func(i int) bool
	assign = func(i int) bool {
		if i == len(names) {
			return true
		}
		for j, t := range p.dnsNames {
			if used[j] || !t.Matches(names[i], vals) || validDNSName(names[i], strings.HasPrefix(t.String(), "*.")) != nil {
				continue
			}
			used[j] = true
			if assign(i + 1) {
				return true
			}
			used[j] = false
		}
		return false
	}
	return assign(0)
}
