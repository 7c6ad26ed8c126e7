package trustbundle

import (
	"crypto/x509"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

// retain implements the grace period of spec.options.retainRemovedFor: a CA
// of the last published bundle that is missing from the sources stays in
// the bundle until grace has passed since it was first missed (and, with
// dropExpired, until it expires). During a CA rotation of a ConfigMap,
// Secret or inline source this keeps peers that still present certificates
// of the old CA trusted.
//
// A CA never retained (never) is dropped at once: one that was in SPIRE's
// bundle, since SPIRE keeps a rotated CA in its bundle until it expires, so
// one that leaves early was revoked, and keeping it would keep trusting a
// compromised key; and a public root, which leaves because the publicRoots
// source was removed or the root set dropped or constrained it.
//
// It returns the bundle to publish and its status record.
func retain(current *bundle.Bundle, previous []v1alpha1.PublishedCertificate, never func(sha256 string) bool, grace time.Duration, dropExpired bool, now time.Time) (*bundle.Bundle, []v1alpha1.PublishedCertificate) {
	inSource := map[string]bool{}
	for _, c := range current.Certificates() {
		inSource[c.SHA256] = true
	}
	leftAt := map[string]metav1.Time{}
	certs := current.X509()
	if grace > 0 {
		for _, p := range previous {
			if inSource[p.SHA256] || never(p.SHA256) {
				continue
			}
			left := metav1.NewTime(now)
			if p.LeftSourceAt != nil && !p.LeftSourceAt.After(now) {
				// The operator records only times that have come; a later
				// one (written by someone else) would retain the CA past
				// the grace period, for as long as it is in the future.
				left = *p.LeftSourceAt
			}
			if !now.Before(left.Add(grace)) {
				continue
			}
			parsed, err := bundle.ParsePEM([]byte(p.PEM))
			if err != nil || len(parsed) != 1 || bundle.NewCertificate(parsed[0]).SHA256 != p.SHA256 {
				// A status we cannot read, or whose PEM is not the
				// certificate its hash names (the hash decided it may be
				// retained), retains nothing.
				continue
			}
			if dropExpired && now.After(parsed[0].NotAfter) {
				continue
			}
			certs = append(certs, parsed[0])
			leftAt[p.SHA256] = left
		}
	}
	out := bundle.New(certs, nil)
	return out, published(out, leftAt)
}

// previouslyFromSpire returns whether a certificate of the last published
// bundle was an authority of a trust domain read from SPIRE, as st records:
// in its formats, or marked FromSPIRE (it was one at an earlier pass).
// A status that does not record it (written by an older operator) counts
// every certificate as from SPIRE when the TrustBundle has a spire source,
// so that nothing SPIRE revoked is retained.
func previouslyFromSpire(st *v1alpha1.TrustBundleStatus, hasSpireSource bool) func(string) bool {
	if !formatsRecorded(st) {
		set := spireAuthorities(st.Certificates, nil)
		return func(sha string) bool { return hasSpireSource || set[sha] }
	}
	set := spireAuthorities(st.Certificates, st.Formats)
	return func(sha string) bool { return set[sha] }
}

// neverRetained returns whether a certificate of the last published bundle
// may not be retained: it was from SPIRE (previouslyFromSpire), is marked
// FromPublicRoots, or is one of the public roots (isPublicRoot, the pinned
// set; a status written before the mark existed has no mark to read).
func neverRetained(st *v1alpha1.TrustBundleStatus, hasSpireSource bool, isPublicRoot func(string) bool) func(string) bool {
	fromSpire := previouslyFromSpire(st, hasSpireSource)
	marked := publicRootMarks(st.Certificates)
	return func(sha string) bool { return fromSpire(sha) || marked[sha] || isPublicRoot(sha) }
}

// markOrigins sets FromSPIRE on each of certs that is an authority of a
// trust domain read from SPIRE now (rec) or was marked in previous, and
// FromPublicRoots on each that is a public root now (isPublicRoot) or was
// marked in previous: the marks stay while the CA stays published (see
// retain).
func markOrigins(certs, previous []v1alpha1.PublishedCertificate, rec *v1alpha1.PublishedFormats, isPublicRoot func(string) bool) {
	fromSpire := spireAuthorities(previous, rec)
	wasPublic := publicRootMarks(previous)
	for i := range certs {
		sha := certs[i].SHA256
		certs[i].FromSPIRE = fromSpire[sha]
		certs[i].FromPublicRoots = isPublicRoot(sha) || wasPublic[sha]
	}
}

// publicRootMarks returns the SHA-256 of each of certs marked FromPublicRoots.
func publicRootMarks(certs []v1alpha1.PublishedCertificate) map[string]bool {
	set := map[string]bool{}
	for _, c := range certs {
		if c.FromPublicRoots {
			set[c.SHA256] = true
		}
	}
	return set
}

// spireAuthorities returns the SHA-256 of each of certs marked FromSPIRE
// and, when f is set, of each X.509 authority f records of a trust domain
// read from SPIRE (the local one and the federated ones).
func spireAuthorities(certs []v1alpha1.PublishedCertificate, f *v1alpha1.PublishedFormats) map[string]bool {
	set := map[string]bool{}
	for _, c := range certs {
		if c.FromSPIRE {
			set[c.SHA256] = true
		}
	}
	if f == nil {
		return set
	}
	for _, sha := range f.X509Authorities {
		set[sha] = true
	}
	for _, d := range f.Federated {
		for _, sha := range d.X509Authorities {
			set[sha] = true
		}
	}
	return set
}

func published(b *bundle.Bundle, leftAt map[string]metav1.Time) []v1alpha1.PublishedCertificate {
	var out []v1alpha1.PublishedCertificate
	for _, c := range b.Certificates() {
		p := v1alpha1.PublishedCertificate{
			SHA256:   c.SHA256,
			Subject:  c.X509.Subject.String(),
			NotAfter: metav1.NewTime(c.X509.NotAfter),
			PEM:      string(pemOf(c.X509)),
		}
		if t, ok := leftAt[c.SHA256]; ok {
			p.LeftSourceAt = &t
		}
		out = append(out, p)
	}
	return out
}

func pemOf(c *x509.Certificate) []byte { return bundle.New([]*x509.Certificate{c}, nil).PEM() }

// NextDeadline returns when the published bundle of tb changes by the
// passage of time alone (a retained CA's grace ends, or with dropExpired a
// CA expires), or the zero time if never. Package trigger requeues then.
func NextDeadline(tb *v1alpha1.TrustBundle) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	grace := time.Duration(0)
	if tb.Spec.Options.RetainRemovedFor != nil {
		grace = tb.Spec.Options.RetainRemovedFor.Duration
	}
	for _, c := range tb.Status.Certificates {
		if c.LeftSourceAt != nil {
			consider(c.LeftSourceAt.Add(grace))
		}
		if tb.Spec.Options.DropExpired {
			consider(c.NotAfter.Add(time.Second))
		}
	}
	return next
}

// publishedMemory remembers, by TrustBundle UID, what this process
// published: the CAs, which of them it marked never to retain (from SPIRE,
// public roots), and the formats it recorded (the trust domain of each
// X.509 authority, the JWT authorities). Whoever may write the status (the
// operator's own service account token) could otherwise record a CA or a
// JWT key of their own there, or erase a CA's origin, and have the
// operator distribute it to every target for the grace period, or to new
// targets while the sources fail. The first pass of a TrustBundle after the
// process starts has nothing to check against: it takes the status as it
// reads it then (adopt), and later passes are held to that.
type publishedMemory struct {
	mu sync.Mutex
	of map[types.UID]*publication
}

// publication is what the process published for one TrustBundle.
type publication struct {
	cas     map[string]bool
	never   map[string]bool
	formats *v1alpha1.PublishedFormats
	// left is when each retained CA left the sources, as the process
	// first recorded it: a status that moves the time later would start
	// the grace period again at every pass.
	left map[string]metav1.Time
}

// adopt takes st, the status of tb as its first pass in this process reads
// it, as what the process published for tb, unless it remembers a
// publication already: what a status writer records after that pass is
// then held to it.
func (m *publishedMemory) adopt(uid types.UID, st *v1alpha1.TrustBundleStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.of[uid] != nil {
		return
	}
	never := spireAuthorities(st.Certificates, st.Formats)
	certs := make([]v1alpha1.PublishedCertificate, len(st.Certificates))
	for i, c := range st.Certificates {
		c.DeepCopyInto(&certs[i])
		certs[i].FromSPIRE = certs[i].FromSPIRE || never[c.SHA256]
	}
	m.recordLocked(uid, certs, st.Formats)
}

// vouched returns those of recorded, the certificates tb's status records
// as published, that this process published for tb (or adopted at tb's
// first pass), none when it holds nothing for tb; a retained CA's
// leftSourceAt is no later than the process recorded.
func (m *publishedMemory) vouched(uid types.UID, recorded []v1alpha1.PublishedCertificate) []v1alpha1.PublishedCertificate {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.of[uid].vouched(recorded)
}

// vouched returns those of recorded that p holds, each with the earlier of
// its leftSourceAt and the one p recorded (none when p recorded it as in
// the sources); none when p is nil: a status read before the first pass
// adopted one vouches for nothing.
func (p *publication) vouched(recorded []v1alpha1.PublishedCertificate) []v1alpha1.PublishedCertificate {
	if p == nil {
		return nil
	}
	out := make([]v1alpha1.PublishedCertificate, 0, len(recorded))
	for _, c := range recorded {
		if !p.cas[c.SHA256] {
			continue
		}
		switch left, ok := p.left[c.SHA256]; {
		case !ok:
			// The process last published it from the sources: if it left
			// them, it left now, whatever an older status says.
			c.LeftSourceAt = nil
		case c.LeftSourceAt == nil || left.Before(c.LeftSourceAt):
			c.LeftSourceAt = &left
		}
		out = append(out, c)
	}
	return out
}

// vouchesFor reports whether recorded and formats, the last good bundle
// tb's status records, are what this process published for tb, or adopted
// at its first pass (every certificate one it holds, the formats those it
// recorded last); false when it holds nothing for tb.
func (m *publishedMemory) vouchesFor(uid types.UID, recorded []v1alpha1.PublishedCertificate, formats *v1alpha1.PublishedFormats) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ours := m.of[uid]
	return ours != nil && len(ours.vouched(recorded)) == len(recorded) && equality.Semantic.DeepEqual(ours.formats, formats)
}

// neverRetained reports whether this process marked the certificate sha
// of tb never to be retained (it was from SPIRE, or a public root, while
// published): a status that lost the mark does not make it retainable.
func (m *publishedMemory) neverRetained(uid types.UID, sha string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ours, ok := m.of[uid]
	return ok && ours.never[sha]
}

// record remembers certs and formats as what this process publishes for
// tb. The marks never to retain add up for as long as a CA stays
// published, as in the status.
func (m *publishedMemory) record(uid types.UID, certs []v1alpha1.PublishedCertificate, formats *v1alpha1.PublishedFormats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recordLocked(uid, certs, formats)
}

// recordLocked is record with m.mu held.
func (m *publishedMemory) recordLocked(uid types.UID, certs []v1alpha1.PublishedCertificate, formats *v1alpha1.PublishedFormats) {
	if m.of == nil {
		m.of = map[types.UID]*publication{}
	}
	prev := m.of[uid]
	next := &publication{cas: make(map[string]bool, len(certs)), never: map[string]bool{}, formats: formats.DeepCopy(),
		left: map[string]metav1.Time{}}
	for _, c := range certs {
		next.cas[c.SHA256] = true
		if c.FromSPIRE || c.FromPublicRoots || (prev != nil && prev.never[c.SHA256]) {
			next.never[c.SHA256] = true
		}
		if c.LeftSourceAt != nil {
			next.left[c.SHA256] = *c.LeftSourceAt
		}
	}
	m.of[uid] = next
}

// forget drops what the process remembers of tb.
func (m *publishedMemory) forget(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.of, uid)
}
