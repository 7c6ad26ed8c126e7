package source

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
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
	// Certificates of all sources, in source order, not yet deduplicated.
	Certificates []*x509.Certificate
	// JWTAuthorities of the SPIRE sources.
	JWTAuthorities []bundle.JWTAuthority
	// SpireTrustDomain is the SPIRE server's trust domain when a spire
	// source was read.
	SpireTrustDomain string
}

// Resolver reads sources.
type Resolver struct {
	// Reader reads ConfigMaps and Secrets; use an uncached reader.
	Reader client.Reader
	// Spire reads SPIRE bundles; nil when no SPIRE connection is configured.
	Spire spire.Reader
	// AllowSecrets permits Secret sources.
	AllowSecrets bool
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Resolve reads and validates every source. The first source that fails
// stops the resolution.
func (r *Resolver) Resolve(ctx context.Context, sources []v1alpha1.Source) (*Result, error) {
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	res := &Result{}
	for i, s := range sources {
		desc := Describe(i, s)
		certs, jwt, td, err := r.read(ctx, s)
		if err != nil {
			var se *Error
			if errors.As(err, &se) {
				se.Source = desc
				return nil, se
			}
			var be *bundle.Error
			if errors.As(err, &be) {
				return nil, &Error{Source: desc, Reason: be.Reason, Err: err}
			}
			return nil, &Error{Source: desc, Reason: ReasonReadFailed, Transient: true, Err: err}
		}
		if err := bundle.RequireValidCA(certs, now); err != nil {
			var be *bundle.Error
			errors.As(err, &be)
			return nil, &Error{Source: desc, Reason: be.Reason, Err: err}
		}
		res.Certificates = append(res.Certificates, certs...)
		res.JWTAuthorities = append(res.JWTAuthorities, jwt...)
		if td != "" {
			res.SpireTrustDomain = td
		}
	}
	return res, nil
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
	default:
		return fmt.Sprintf("sources[%d] (inline)", i)
	}
}

func (r *Resolver) read(ctx context.Context, s v1alpha1.Source) ([]*x509.Certificate, []bundle.JWTAuthority, string, error) {
	if s.SPIRE != nil {
		return r.readSpire(ctx, s.SPIRE)
	}
	data, err := r.pemText(ctx, s)
	if err != nil {
		return nil, nil, "", err
	}
	certs, err := bundle.ParsePEM(data)
	return certs, nil, "", err
}

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
	err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ks.Namespace, Name: ks.Name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		return &Error{Reason: ReasonNotFound, Err: err}
	case err != nil:
		return &Error{Reason: ReasonReadFailed, Transient: true, Err: err}
	}
	return nil
}

func (r *Resolver) readSpire(ctx context.Context, s *v1alpha1.SPIRESource) ([]*x509.Certificate, []bundle.JWTAuthority, string, error) {
	if r.Spire == nil {
		return nil, nil, "", &Error{Reason: ReasonSpireNotConfigured, Err: errors.New("start the operator with --spire-socket or --spire-address")}
	}
	own, err := r.Spire.ServerBundle(ctx)
	if err != nil {
		return nil, nil, "", &Error{Reason: ReasonSpireUnavailable, Transient: true, Err: err}
	}
	bundles := []*spire.Bundle{own}
	if len(s.FederatedTrustDomains) > 0 {
		fed, err := r.Spire.FederatedBundles(ctx)
		if err != nil {
			return nil, nil, "", &Error{Reason: ReasonSpireUnavailable, Transient: true, Err: err}
		}
		for _, td := range s.FederatedTrustDomains {
			b, ok := fed[td]
			if !ok {
				return nil, nil, "", &Error{Reason: ReasonFederatedBundleNotFound, Err: fmt.Errorf("SPIRE has no bundle for federated trust domain %q", td)}
			}
			bundles = append(bundles, b)
		}
	}
	var certs []*x509.Certificate
	var jwt []bundle.JWTAuthority
	for _, b := range bundles {
		c, err := bundle.ParseDER(b.X509Authorities)
		if err != nil {
			return nil, nil, "", fmt.Errorf("bundle of %s: %w", b.TrustDomain, err)
		}
		certs = append(certs, c...)
		// Only the server's own JWT authorities: a JWKS mixing trust
		// domains would let one domain's key verify another's tokens.
		if b != own {
			continue
		}
		for _, k := range b.JWTAuthorities {
			pub, err := x509.ParsePKIXPublicKey(k.PublicKey)
			if err != nil {
				return nil, nil, "", &Error{Reason: bundle.ReasonUnparseable, Err: fmt.Errorf("JWT authority %q of %s: %w", k.KeyID, b.TrustDomain, err)}
			}
			jwt = append(jwt, bundle.JWTAuthority{KeyID: k.KeyID, PublicKey: pub})
		}
	}
	return certs, jwt, own.TrustDomain, nil
}

// Revision returns a string that changes whenever the content of the
// ConfigMap and Secret sources may have changed (their resourceVersions, or
// their absence), read as metadata only. SPIRE sources are not included:
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
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		err := r.Reader.Get(ctx, client.ObjectKey{Namespace: ks.Namespace, Name: ks.Name}, m)
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
