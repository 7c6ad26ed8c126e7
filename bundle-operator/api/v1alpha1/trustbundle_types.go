package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/status"
)

// InjectAnnotation names the TrustBundle whose PEM bundle is injected into the
// caBundle fields of an annotated ValidatingWebhookConfiguration,
// MutatingWebhookConfiguration, APIService or CustomResourceDefinition.
const InjectAnnotation = "bundle.trustplane.dev/inject"

// TrustBundleSpec is the desired state of a TrustBundle: where the CA
// certificates come from, where they go, and how they are filtered.
// +kubebuilder:validation:XValidation:rule="self.sources.exists(s, has(s.spire)) || !has(self.target) || ((!has(self.target.configMap) || !has(self.target.configMap.keys) || ((!has(self.target.configMap.keys.spiffe) || self.target.configMap.keys.spiffe.size() == 0) && (!has(self.target.configMap.keys.federatedSpiffe) || self.target.configMap.keys.federatedSpiffe.size() == 0))) && (!has(self.target.secret) || !has(self.target.secret.keys) || ((!has(self.target.secret.keys.spiffe) || self.target.secret.keys.spiffe.size() == 0) && (!has(self.target.secret.keys.federatedSpiffe) || self.target.secret.keys.federatedSpiffe.size() == 0))))",message="the spiffe and federatedSpiffe keys need a spire source: a trust domain's authorities come only from its SPIRE server"
type TrustBundleSpec struct {
	// Sources are merged into one bundle. Every source must pass validation;
	// one that does not stops all changes to existing targets, so they keep
	// their last good bundle, and targets that do not exist yet get that same
	// bundle.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Sources []Source `json:"sources"`

	// Target says where the bundle is written.
	// +optional
	Target Target `json:"target,omitempty"`

	// TrustDomain, when set, must be the trust domain of the SPIRE server of
	// the spire sources; otherwise nothing is written (Ready=False, reason
	// TrustDomainMismatch). The SPIFFE format is always the SPIRE server's
	// own trust domain.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9._-]+$`
	TrustDomain string `json:"trustDomain,omitempty"`

	// Options filter and stabilise the merged bundle.
	// +optional
	Options Options `json:"options,omitempty"`
}

// Source is one origin of CA certificates. Exactly one field is set.
// +kubebuilder:validation:XValidation:rule="(has(self.spire) ? 1 : 0) + (has(self.configMap) ? 1 : 0) + (has(self.secret) ? 1 : 0) + (has(self.inline) ? 1 : 0) + (has(self.publicRoots) ? 1 : 0) == 1",message="set exactly one of spire, configMap, secret, inline, publicRoots"
type Source struct {
	// SPIRE reads the SPIRE server's own bundle through its Bundle API and,
	// on request, the bundles of federated trust domains.
	// +optional
	SPIRE *SPIRESource `json:"spire,omitempty"`

	// ConfigMap reads a PEM bundle from a key of a ConfigMap.
	// +optional
	ConfigMap *KeySelector `json:"configMap,omitempty"`

	// Secret reads a PEM bundle from a key of a Secret. The operator must be
	// started with --allow-secret-sources.
	// +optional
	Secret *KeySelector `json:"secret,omitempty"`

	// PublicRoots adds the public (Mozilla NSS) root CAs, from the module
	// golang.org/x/crypto/x509roots/fallback at the version the operator
	// was built with (status.publicRoots). Roots that carry constraints a
	// PEM bundle cannot express (a distrust-after date) are left out.
	// +optional
	PublicRoots *PublicRootsSource `json:"publicRoots,omitempty"`
	// Inline is a PEM bundle given in place.
	// +optional
	// +kubebuilder:validation:MaxLength=1048576
	Inline string `json:"inline,omitempty"`
}

// PublicRootsSource selects the public root CAs; it has no settings.
type PublicRootsSource struct{}

// SPIRESource selects bundles of the SPIRE server the operator is connected to.
type SPIRESource struct {
	// FederatedTrustDomains adds the bundles SPIRE holds for these federated
	// trust domains (names without the spiffe:// prefix). The server's own
	// bundle is always included.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9._-]+$`
	FederatedTrustDomains []string `json:"federatedTrustDomains,omitempty"`
}

// KeySelector names one key of a ConfigMap or Secret.
type KeySelector struct {
	// Namespace of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key holding a PEM bundle.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// Target says where the bundle goes. Injection into annotated webhooks,
// APIServices and CRDs needs no target: it follows InjectAnnotation.
type Target struct {
	// ConfigMap is written in every namespace that NamespaceSelector picks.
	// +optional
	ConfigMap *ObjectTarget `json:"configMap,omitempty"`

	// Secret is written, like ConfigMap, in every selected namespace.
	// +optional
	Secret *ObjectTarget `json:"secret,omitempty"`

	// ClusterTrustBundle is written once for the cluster (certificates.k8s.io/v1,
	// no signer): its spec.trustBundle is the PEM bundle, and pods project it
	// directly. The operator must run with --cluster-trust-bundles.
	// +optional
	ClusterTrustBundle *ClusterTrustBundleTarget `json:"clusterTrustBundle,omitempty"`
	// NamespaceSelector picks the namespaces of the ConfigMap and Secret
	// targets. Unset means every namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// ClusterTrustBundleTarget names the ClusterTrustBundle a TrustBundle writes.
type ClusterTrustBundleTarget struct {
	// Name of the ClusterTrustBundle. Without a signer it must not contain
	// a colon.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// ObjectTarget is a ConfigMap or Secret of a given name, with a key per format.
type ObjectTarget struct {
	// Name of the object in each selected namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// Keys names the key of each format. Only the keys set are written.
	// +optional
	Keys Keys `json:"keys,omitempty"`
}

// Keys names the data key of each output format; an empty name skips that
// format. With no key set at all, the PEM bundle goes to "ca.crt".
// +kubebuilder:validation:XValidation:rule="(!has(self.pem) || self.pem.size() == 0 || ((!has(self.spiffe) || self.pem != self.spiffe) && (!has(self.jwks) || self.pem != self.jwks))) && (!has(self.spiffe) || self.spiffe.size() == 0 || !has(self.jwks) || self.spiffe != self.jwks)",message="the keys of the formats must be distinct"
type Keys struct {
	// PEM is the key of the concatenated PEM certificates.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	PEM string `json:"pem,omitempty"`
	// SPIFFE is the key of the SPIFFE bundle (JSON, JWKS with x509-svid and
	// jwt-svid keys) of the SPIRE server's own trust domain. It holds only
	// the authorities SPIRE has for that trust domain: never those of
	// federated trust domains or of ConfigMap, Secret or inline sources.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	SPIFFE string `json:"spiffe,omitempty"`
	// FederatedSPIFFE is a key prefix: the SPIFFE bundle of each federated
	// trust domain of the spire sources goes to its own key, the prefix
	// followed by the trust domain name (e.g. "federated." gives
	// "federated.other.org"). Empty skips them.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	FederatedSPIFFE string `json:"federatedSpiffe,omitempty"`
	// JWKS is the key of a JSON Web Key Set of the JWT authorities.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	JWKS string `json:"jwks,omitempty"`
	// PKCS12 is the key of a PKCS#12 trust store of the certificates (in a
	// ConfigMap's binaryData), protected by TrustStorePassword.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	PKCS12 string `json:"pkcs12,omitempty"`
	// JKS is the key of a Java KeyStore of the certificates (in a
	// ConfigMap's binaryData), protected by TrustStorePassword.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]*$`
	JKS string `json:"jks,omitempty"`
	// TrustStorePassword protects the PKCS#12 and JKS trust stores; empty
	// by default. It guards their integrity, not a secret: they hold only
	// public certificates.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	TrustStorePassword string `json:"trustStorePassword,omitempty"`
}

// Options filter and stabilise the merged bundle.
type Options struct {
	// DropExpired removes certificates whose NotAfter has passed and JWT
	// authorities whose expiry (SPIRE's expiresAt) has passed.
	// +optional
	DropExpired bool `json:"dropExpired,omitempty"`

	// DropNonCA drops certificates that are not CAs (basic constraints
	// absent or CA:FALSE, or a key usage without keyCertSign). Without it
	// a source holding one is refused (reason NotACA).
	// +optional
	DropNonCA bool `json:"dropNonCA,omitempty"`

	// RetainRemovedFor keeps a CA that left every ConfigMap, Secret and
	// inline source for this long, so that during a rotation peers holding
	// the old CA keep being trusted. A CA that leaves SPIRE's bundle is
	// never retained: SPIRE keeps a rotated CA until it expires, so one
	// that leaves early was revoked.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="must not be negative"
	RetainRemovedFor *metav1.Duration `json:"retainRemovedFor,omitempty"`
}

// PublishedCertificate is one CA of the last published bundle.
type PublishedCertificate struct {
	// SHA256 is the hex SHA-256 of the DER certificate.
	SHA256 string `json:"sha256"`
	// Subject is the certificate's subject.
	Subject string `json:"subject"`
	// NotAfter is the certificate's expiry.
	NotAfter metav1.Time `json:"notAfter"`
	// LeftSourceAt is when the CA was first missing from the sources; set
	// only while it is retained for options.retainRemovedFor.
	// +optional
	LeftSourceAt *metav1.Time `json:"leftSourceAt,omitempty"`
	// FromSPIRE is whether the CA has been, while published, an authority
	// of a trust domain read from SPIRE. The mark stays while the CA stays
	// published, so a CA SPIRE dropped is never retained, whichever other
	// source still held it for a while.
	// +optional
	FromSPIRE bool `json:"fromSPIRE,omitempty"`
	// FromPublicRoots is whether the CA has been, while published, one of
	// the public roots. The mark stays while the CA stays published, so a
	// public root is never retained once no source supplies it: not when
	// the publicRoots source is removed, nor when a newer root set drops or
	// constrains it.
	// +optional
	FromPublicRoots bool `json:"fromPublicRoots,omitempty"`
	// PEM is the certificate, kept so that it can be retained after it left
	// the sources and the bundle rebuilt for new targets while a source
	// fails. Empty when the bundle was too large for the status to hold it.
	PEM string `json:"pem"`
}

// PublishedFormats is what the SPIFFE and JWKS formats of the last published
// bundle were rendered from besides its certificates.
type PublishedFormats struct {
	// TrustDomain is the SPIRE server's own trust domain, that of the
	// SPIFFE format; empty without a spire source.
	// +optional
	TrustDomain string `json:"trustDomain,omitempty"`
	// JWTAuthorities are the JWT authorities of TrustDomain, sorted by key
	// ID: the JWKS format and the jwt-svid keys of the SPIFFE format.
	// +optional
	// +listType=atomic
	JWTAuthorities []PublishedJWTAuthority `json:"jwtAuthorities,omitempty"`
	// X509Authorities are the SHA-256 of the certificates (in
	// status.certificates) that are the X.509 authorities of TrustDomain.
	// +optional
	// +listType=atomic
	X509Authorities []string `json:"x509Authorities,omitempty"`
	// Federated are the federated trust domains, each published as its own
	// SPIFFE bundle.
	// +optional
	// +listType=atomic
	Federated []PublishedTrustDomain `json:"federated,omitempty"`
}

// PublishedTrustDomain is the SPIFFE bundle of a federated trust domain in
// the last published bundle.
type PublishedTrustDomain struct {
	// TrustDomain is the trust domain name.
	TrustDomain string `json:"trustDomain"`
	// X509Authorities are the SHA-256 of its X.509 authorities (in
	// status.certificates).
	// +listType=atomic
	X509Authorities []string `json:"x509Authorities"`
	// JWTAuthorities are its JWT authorities, sorted by key ID.
	// +optional
	// +listType=atomic
	JWTAuthorities []PublishedJWTAuthority `json:"jwtAuthorities,omitempty"`
}

// PublishedJWTAuthority is a JWT authority of the last published bundle.
type PublishedJWTAuthority struct {
	// KeyID is the key's "kid".
	KeyID string `json:"keyID"`
	// PublicKey is the public key in PKIX, ASN.1 DER form.
	PublicKey []byte `json:"publicKey"`
}

// TrustBundleStatus is the observed state of a TrustBundle. Its conditions
// are Ready and Processing (set by the framework), SourcesValid and
// TargetsInSync (set by the handler).
type TrustBundleStatus struct {
	status.Common `json:",inline"`

	// Fingerprint is "sha256:" and the hex SHA-256 of the PEM bundle.
	// +optional
	Fingerprint string `json:"fingerprint,omitempty"`

	// CACount is the number of CA certificates in the bundle.
	// +optional
	CACount int32 `json:"caCount,omitempty"`

	// EarliestExpiry is the earliest NotAfter among the bundle's CAs.
	// +optional
	EarliestExpiry *metav1.Time `json:"earliestExpiry,omitempty"`

	// TargetsInSync counts targets holding the current bundle.
	// +optional
	TargetsInSync int32 `json:"targetsInSync,omitempty"`

	// TargetsFailed counts targets the last pass could not write.
	// +optional
	TargetsFailed int32 `json:"targetsFailed,omitempty"`

	// FailedTargets names the first failed targets with their error.
	// +optional
	// +listType=atomic
	FailedTargets []string `json:"failedTargets,omitempty"`

	// PublicRoots is the version of the public root set in the bundle, when
	// a publicRoots source is used.
	// +optional
	PublicRoots string `json:"publicRoots,omitempty"`
	// LastChangeTime is when the bundle content last changed.
	// +optional
	LastChangeTime *metav1.Time `json:"lastChangeTime,omitempty"`

	// Certificates are the CAs of the last published bundle.
	// +optional
	// +listType=atomic
	Certificates []PublishedCertificate `json:"certificates,omitempty"`

	// Formats holds, with Certificates, what the last published bundle was
	// rendered from. While a source fails, targets that do not exist yet get
	// that bundle, rebuilt byte for byte from the status. Unset when the
	// bundle was published by an operator that did not record it; then only
	// the PEM format can be rebuilt.
	// +optional
	Formats *PublishedFormats `json:"formats,omitempty"`
}

// TrustBundle validates CA certificates from SPIRE, ConfigMaps, Secrets or
// inline PEM and distributes them to ConfigMaps, Secrets and the caBundle of
// annotated webhooks, APIServices and CRDs.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="the name is used as a label value: at most 63 characters"
// +kubebuilder:resource:scope=Cluster,shortName=tb
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="CAs",type=integer,JSONPath=`.status.caCount`
// +kubebuilder:printcolumn:name="In sync",type=integer,JSONPath=`.status.targetsInSync`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.targetsFailed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TrustBundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired state.
	Spec TrustBundleSpec `json:"spec,omitempty"`
	// Status is the observed state.
	Status TrustBundleStatus `json:"status,omitempty"`
}

// CommonStatus implements object.Object.
func (t *TrustBundle) CommonStatus() *status.Common { return &t.Status.Common }

// +kubebuilder:object:root=true

// TrustBundleList is a list of TrustBundles.
type TrustBundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the TrustBundles.
	Items []TrustBundle `json:"items"`
}

// GetItems implements object.List.
func (l *TrustBundleList) GetItems() []*TrustBundle {
	out := make([]*TrustBundle, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func init() {
	SchemeBuilder.Register(&TrustBundle{}, &TrustBundleList{})
}
