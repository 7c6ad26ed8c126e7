package source

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
	"github.com/trustplane/trustplane/common/x509ca"
)

// Reasons a source cannot be read, besides the content reasons of package
// bundle. Each is a condition reason.
const (
	// ReasonNotFound: the ConfigMap, Secret or key does not exist.
	ReasonNotFound = "SourceNotFound"
	// ReasonSecretsDisabled: a Secret source while the operator was started
	// without --allow-secret-sources.
	ReasonSecretsDisabled = "SecretSourcesDisabled"
	// ReasonSpireNotConfigured: a spire source while the operator has no
	// SPIRE connection configured.
	ReasonSpireNotConfigured = "SpireNotConfigured"
	// ReasonSpireUnavailable: the SPIRE Bundle API did not answer.
	ReasonSpireUnavailable = "SpireUnavailable"
	// ReasonFederatedBundleNotFound: SPIRE holds no bundle for a requested
	// federated trust domain.
	ReasonFederatedBundleNotFound = "FederatedBundleNotFound"
	// ReasonReadFailed: the Kubernetes API did not answer.
	ReasonReadFailed = "SourceReadFailed"
	// ReasonNamespaceNotAllowed: a ConfigMap or Secret source in a namespace
	// the operator does not read sources from (--source-namespaces).
	ReasonNamespaceNotAllowed = "SourceNamespaceNotAllowed"
	// ReasonTrustDomainMismatch: spec.trustDomain is not the trust domain of
	// the SPIRE server.
	ReasonTrustDomainMismatch = "TrustDomainMismatch"
	// ReasonAuthorityOfAnotherTrustDomain: a trust domain's bundle from
	// SPIRE holds a CA naming another trust domain in its spiffe:// URI
	// SAN. Like any refused content, targets keep their last good bundle
	// and new ones get it.
	ReasonAuthorityOfAnotherTrustDomain = "AuthorityOfAnotherTrustDomain"
	// ReasonNoSources: the TrustBundle names no source (admission requires
	// one; this guards a spec that bypassed it), so there is nothing to
	// publish but an empty bundle.
	ReasonNoSources = "NoSources"
)

// Error is a source that could not be used.
type Error struct {
	// Source describes the source, e.g. `sources[1] (configMap ns/name key ca.crt)`.
	Source string
	// Reason is a condition reason (a constant of this package or of bundle).
	Reason string
	// Transient is true when retrying may help without a change by the user
	// (an API that did not answer).
	Transient bool
	// Err is the cause.
	Err error
}

// Error implements error: the source, the reason and the cause, without
// repeating a reason the cause already names.
func (e *Error) Error() string {
	cause := e.Err.Error()
	if strings.HasPrefix(cause, e.Reason+":") {
		return fmt.Sprintf("%s: %s", e.Source, cause)
	}
	return fmt.Sprintf("%s: %s: %s", e.Source, e.Reason, cause)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Result is the content of all sources, each validated.
type Result struct {
	// Certificates are the CAs of all sources (SPIRE's own and federated
	// trust domains' included), in source order, not yet deduplicated: the
	// content of the PEM format.
	Certificates []*x509.Certificate
	// Local is the SPIRE server's own trust domain with its X.509 and JWT
	// authorities; nil without a spire source.
	Local *bundle.Domain
	// Federated are the bundles of the requested federated trust domains,
	// one per trust domain, sorted by name.
	Federated []bundle.Domain
	// FromSpire holds the SHA-256 of every certificate read from SPIRE.
	FromSpire map[string]bool
}

// Resolver reads sources.
type Resolver struct {
	// Reader reads ConfigMaps and Secrets; use an uncached reader.
	Reader client.Reader
	// Metadata, when set, reads the metadata of ConfigMap sources for
	// Revision: the manager's cache, which holds every ConfigMap of the
	// source namespaces as metadata. Nil reads it through Reader.
	Metadata client.Reader
	// Spire reads SPIRE bundles; nil when no SPIRE connection is configured.
	Spire spire.Reader
	// AllowSecrets permits Secret sources.
	AllowSecrets bool
	// Namespaces are the only namespaces ConfigMap and Secret sources are
	// read from; a source naming another is refused. Empty allows none.
	Namespaces []string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Resolve reads and validates every source of spec. The first source that
// fails stops the resolution. Each source is validated on its own and each
// trust domain of a spire source on its own: at least one CA valid now,
// nothing that is not a CA (unless spec.options.dropNonCA drops it), no JWT
// key ID held by two different keys. spec.trustDomain, when set, must be
// the SPIRE server's trust domain.
func (r *Resolver) Resolve(ctx context.Context, spec *v1alpha1.TrustBundleSpec) (*Result, error) {
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	if len(spec.Sources) == 0 {
		return nil, &Error{Source: "spec.sources", Reason: ReasonNoSources,
			Err: errors.New("the TrustBundle names no source; an empty bundle is never published")}
	}
	res := &Result{FromSpire: map[string]bool{}}
	var (
		local     *spire.Bundle
		localDesc string
		federated = map[string]*spire.Bundle{}
		fedDesc   = map[string]string{}
	)
	for i, s := range spec.Sources {
		desc := Describe(i, s)
		fail := func(err error) error {
			var se *Error
			if errors.As(err, &se) {
				se.Source = desc
				return se
			}
			var be *bundle.Error
			if errors.As(err, &be) {
				return &Error{Source: desc, Reason: be.Reason, Err: err}
			}
			return &Error{Source: desc, Reason: ReasonReadFailed, Transient: true, Err: err}
		}
		if s.SPIRE != nil {
			own, fed, err := r.readSpire(ctx, s.SPIRE, spec.TrustDomain)
			if err != nil {
				return nil, fail(err)
			}
			if local == nil {
				localDesc = desc
			} else if local.TrustDomain != own.TrustDomain {
				// Two reads of the local bundle from servers of two
				// trust domains (a misconfigured list of servers): one
				// domain's CAs must never sign for the other's.
				return nil, fail(&Error{Reason: ReasonTrustDomainMismatch, Err: fmt.Errorf(
					"the spire sources read the bundles of two trust domains, %q (%s) and %q: the SPIRE servers read must all be of one trust domain",
					local.TrustDomain, localDesc, own.TrustDomain)})
			}
			local = mergeSpire(local, own)
			for _, b := range fed {
				if federated[b.TrustDomain] == nil {
					fedDesc[b.TrustDomain] = desc
				}
				federated[b.TrustDomain] = mergeSpire(federated[b.TrustDomain], b)
			}
			continue
		}
		certs, err := r.readPEM(ctx, s, spec.Options.DropNonCA, now)
		if err != nil {
			return nil, fail(err)
		}
		res.Certificates = append(res.Certificates, certs...)
	}
	if local != nil {
		// Several spire sources read the server's bundle more than once; a
		// rotation between the reads merges both versions, each valid.
		d, err := domain(local, spec.Options.DropNonCA, now)
		if err != nil {
			return nil, &Error{Source: localDesc, Reason: reasonOf(err), Err: err}
		}
		res.Local = &d
		res.add(d)
	}
	for _, td := range slices.Sorted(maps.Keys(federated)) {
		d, err := domain(federated[td], spec.Options.DropNonCA, now)
		if err != nil {
			return nil, &Error{Source: fedDesc[td], Reason: reasonOf(err), Err: err}
		}
		res.Federated = append(res.Federated, d)
		res.add(d)
	}
	return res, nil
}

// add appends the X.509 authorities of d, read from SPIRE, to res.
func (res *Result) add(d bundle.Domain) {
	for _, c := range d.Bundle.Certificates() {
		res.Certificates = append(res.Certificates, c.X509)
		res.FromSpire[c.SHA256] = true
	}
}

// reasonOf returns the reason of a *bundle.Error, or ReasonReadFailed.
func reasonOf(err error) string {
	var be *bundle.Error
	if errors.As(err, &be) {
		return be.Reason
	}
	return ReasonReadFailed
}

// mergeSpire merges two reads of one trust domain's bundle (nil a allowed).
func mergeSpire(a, b *spire.Bundle) *spire.Bundle {
	if a == nil {
		return b
	}
	out := *a
	out.X509Authorities = append(slices.Clone(a.X509Authorities), b.X509Authorities...)
	out.JWTAuthorities = append(slices.Clone(a.JWTAuthorities), b.JWTAuthorities...)
	return &out
}

// domain validates one trust domain's bundle from SPIRE on its own and
// returns it: its X.509 authorities must be CAs (or are dropped with
// dropNonCA), one of them valid now, and no key ID may name two JWT keys.
func domain(b *spire.Bundle, dropNonCA bool, now time.Time) (bundle.Domain, error) {
	certs, err := bundle.ParseDER(b.X509Authorities)
	if err == nil {
		certs, err = caRule(certs, dropNonCA, now)
	}
	if err != nil {
		return bundle.Domain{}, fmt.Errorf("trust domain %s: %w", b.TrustDomain, err)
	}
	for _, c := range certs {
		// A SPIRE CA names its own trust domain: one naming another is
		// that domain's, and would sign for this one in its document.
		if other := x509ca.OtherTrustDomains(c, b.TrustDomain); len(other) > 0 {
			return bundle.Domain{}, reject(ReasonAuthorityOfAnotherTrustDomain,
				"trust domain %s: X.509 authority %q (SHA-256 %s) names the trust domain %s in its spiffe:// URI SAN: "+
					"another trust domain's CA never becomes an authority of this one; take it out of the SPIRE server's bundle of %s",
				b.TrustDomain, c.Subject.String(), bundle.NewCertificate(c).SHA256[:16], strings.Join(other, ", "), b.TrustDomain)
		}
	}
	jwt := make([]bundle.JWTAuthority, 0, len(b.JWTAuthorities))
	for _, k := range b.JWTAuthorities {
		pub, err := x509.ParsePKIXPublicKey(k.PublicKey)
		if err != nil {
			return bundle.Domain{}, reject(bundle.ReasonUnparseable, "trust domain %s: JWT authority %q: %w", b.TrustDomain, k.KeyID, err)
		}
		a := bundle.JWTAuthority{KeyID: k.KeyID, PublicKey: pub}
		if k.ExpiresAt != 0 {
			a.ExpiresAt = time.Unix(k.ExpiresAt, 0)
		}
		jwt = append(jwt, a)
	}
	if err := bundle.RequireDistinctKeyIDs(jwt); err != nil {
		return bundle.Domain{}, fmt.Errorf("trust domain %s: %w", b.TrustDomain, err)
	}
	return bundle.Domain{TrustDomain: b.TrustDomain, Bundle: bundle.New(certs, jwt)}, nil
}

// caRule applies the CA rules to the certificates of one source: every one
// is a CA (or, with dropNonCA, the others are dropped) and one is valid now.
func caRule(certs []*x509.Certificate, dropNonCA bool, now time.Time) ([]*x509.Certificate, error) {
	if dropNonCA {
		certs = bundle.OnlyCAs(certs)
	} else if err := bundle.RequireCAs(certs); err != nil {
		return nil, err
	}
	if err := bundle.RequireValidCA(certs, now); err != nil {
		return nil, err
	}
	return certs, nil
}

// reject builds a *bundle.Error of reason; a %w verb makes its argument the cause.
func reject(reason, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &bundle.Error{Reason: reason, Message: err.Error(), Err: errors.Unwrap(err)}
}

// Describe names source i for conditions and logs.
func Describe(i int, s v1alpha1.Source) string {
	switch {
	case s.SPIRE != nil:
		if len(s.SPIRE.FederatedTrustDomains) > 0 {
			return fmt.Sprintf("sources[%d] (spire, federated %v)", i, s.SPIRE.FederatedTrustDomains)
		}
		return fmt.Sprintf("sources[%d] (spire)", i)
	case s.ConfigMap != nil:
		return fmt.Sprintf("sources[%d] (configMap %s/%s key %s)", i, s.ConfigMap.Namespace, s.ConfigMap.Name, s.ConfigMap.Key)
	case s.Secret != nil:
		return fmt.Sprintf("sources[%d] (secret %s/%s key %s)", i, s.Secret.Namespace, s.Secret.Name, s.Secret.Key)
	case s.PublicRoots != nil:
		return fmt.Sprintf("sources[%d] (publicRoots %s)", i, PublicRootsVersion)
	default:
		return fmt.Sprintf("sources[%d] (inline)", i)
	}
}

// readPEM reads a ConfigMap, Secret, inline or public roots source and
// validates it.
func (r *Resolver) readPEM(ctx context.Context, s v1alpha1.Source, dropNonCA bool, now time.Time) ([]*x509.Certificate, error) {
	if s.PublicRoots != nil {
		certs, err := publicRoots()
		if err != nil {
			return nil, err
		}
		return caRule(certs, dropNonCA, now)
	}
	data, err := r.pemText(ctx, s)
	if err != nil {
		return nil, err
	}
	certs, err := bundle.ParsePEM(data)
	if err != nil {
		return nil, err
	}
	return caRule(certs, dropNonCA, now)
}

// allowed reports whether sources may be read from namespace ns.
func (r *Resolver) allowed(ns string) bool { return slices.Contains(r.Namespaces, ns) }

// pemText returns the PEM text of a ConfigMap, Secret or inline source.
func (r *Resolver) pemText(ctx context.Context, s v1alpha1.Source) ([]byte, error) {
	switch {
	case s.ConfigMap != nil:
		var cm corev1.ConfigMap
		if err := r.get(ctx, s.ConfigMap, &cm); err != nil {
			return nil, err
		}
		data, ok := cm.Data[s.ConfigMap.Key]
		return []byte(data), keyFound(ok, "ConfigMap", s.ConfigMap.Key)
	case s.Secret != nil:
		if !r.AllowSecrets {
			return nil, &Error{Reason: ReasonSecretsDisabled, Err: errors.New("start the operator with --allow-secret-sources to read Secrets")}
		}
		var sec corev1.Secret
		if err := r.get(ctx, s.Secret, &sec); err != nil {
			return nil, err
		}
		data, ok := sec.Data[s.Secret.Key]
		return data, keyFound(ok, "Secret", s.Secret.Key)
	default:
		return []byte(s.Inline), nil
	}
}

// keyFound returns the SourceNotFound error of a missing key, or nil.
func keyFound(ok bool, kind, key string) error {
	if ok {
		return nil
	}
	return &Error{Reason: ReasonNotFound, Err: fmt.Errorf("key %q not in %s", key, kind)}
}

func (r *Resolver) get(ctx context.Context, ks *v1alpha1.KeySelector, obj client.Object) error {
	if !r.allowed(ks.Namespace) {
		return &Error{Reason: ReasonNamespaceNotAllowed, Err: fmt.Errorf(
			"namespace %q is not one the operator reads sources from (%s); whoever can edit objects there would decide what every target trusts",
			ks.Namespace, allowedList(r.Namespaces))}
	}
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ks.Namespace, Name: ks.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return &Error{Reason: ReasonNotFound, Err: err}
	case err != nil:
		return &Error{Reason: ReasonReadFailed, Transient: true, Err: err}
	}
	return nil
}

// allowedList names the allowed namespaces for a message.
func allowedList(ns []string) string {
	if len(ns) == 0 {
		return "none is allowed; see --source-namespaces"
	}
	return "allowed: " + strings.Join(ns, ", ")
}

// readSpire reads the SPIRE server's own bundle and the requested federated
// ones. trustDomain, when set, must be the server's trust domain.
func (r *Resolver) readSpire(ctx context.Context, s *v1alpha1.SPIRESource, trustDomain string) (*spire.Bundle, []*spire.Bundle, error) {
	if r.Spire == nil {
		return nil, nil, &Error{Reason: ReasonSpireNotConfigured, Err: errors.New("start the operator with --spire-socket or --spire-address")}
	}
	own, err := r.Spire.ServerBundle(ctx)
	if err != nil {
		return nil, nil, &Error{Reason: ReasonSpireUnavailable, Transient: true, Err: err}
	}
	if trustDomain != "" && own.TrustDomain != trustDomain {
		return nil, nil, &Error{Reason: ReasonTrustDomainMismatch, Err: fmt.Errorf(
			"spec.trustDomain is %q but the SPIRE server's trust domain is %q", trustDomain, own.TrustDomain)}
	}
	if len(s.FederatedTrustDomains) == 0 {
		return own, nil, nil
	}
	fed, err := r.Spire.FederatedBundles(ctx)
	if err != nil {
		return nil, nil, &Error{Reason: ReasonSpireUnavailable, Transient: true, Err: err}
	}
	var out []*spire.Bundle
	for _, td := range s.FederatedTrustDomains {
		b, ok := fed[td]
		if !ok {
			return nil, nil, &Error{Reason: ReasonFederatedBundleNotFound, Err: fmt.Errorf("SPIRE has no bundle for federated trust domain %q", td)}
		}
		if strings.TrimSuffix(td, ".") == strings.TrimSuffix(own.TrustDomain, ".") {
			// A trailing dot names the same domain to DNS-minded readers.
			return nil, nil, &Error{Reason: ReasonTrustDomainMismatch, Err: fmt.Errorf("federated trust domain %q is the SPIRE server's own", td)}
		}
		if b.TrustDomain != td {
			return nil, nil, &Error{Reason: ReasonTrustDomainMismatch, Err: fmt.Errorf(
				"SPIRE answered the bundle of federated trust domain %q with one of %q", td, b.TrustDomain)}
		}
		out = append(out, b)
	}
	return own, out, nil
}

// Revision returns a string that changes whenever the content of the
// ConfigMap and Secret sources may have changed (their resourceVersions, or
// their absence), read as metadata only: ConfigMaps through Metadata (a
// cache, no request), Secrets through Reader. Sources in namespaces not
// allowed are not read. SPIRE sources are not included:
// package trigger tracks SPIRE's sequence numbers once for all bundles.
func (r *Resolver) Revision(ctx context.Context, sources []v1alpha1.Source) (string, error) {
	var rev string
	for i, s := range sources {
		var ks *v1alpha1.KeySelector
		kind := "ConfigMap"
		switch {
		case s.ConfigMap != nil:
			ks = s.ConfigMap
		case s.Secret != nil:
			ks, kind = s.Secret, "Secret"
		default:
			continue
		}
		if !r.allowed(ks.Namespace) {
			rev += fmt.Sprintf("%d:refused;", i)
			continue
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		reader := r.Reader
		if kind == "ConfigMap" && r.Metadata != nil {
			reader = r.Metadata
		}
		err := reader.Get(ctx, client.ObjectKey{Namespace: ks.Namespace, Name: ks.Name}, m)
		switch {
		case apierrors.IsNotFound(err):
			rev += fmt.Sprintf("%d:absent;", i)
		case err != nil:
			return "", fmt.Errorf("read %s: %w", Describe(i, s), err)
		default:
			rev += fmt.Sprintf("%d:%s;", i, m.ResourceVersion)
		}
	}
	return rev, nil
}
