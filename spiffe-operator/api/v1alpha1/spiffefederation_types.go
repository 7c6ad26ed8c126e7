package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/status"
)

// BundleEndpointProfile is how the SPIRE server authenticates a federated
// trust domain's bundle endpoint.
// +kubebuilder:validation:Enum=https_web;https_spiffe
type BundleEndpointProfile string

// The bundle endpoint profiles of SPIRE's federation relationships.
const (
	// ProfileHTTPSWeb authenticates the endpoint with Web PKI (the system's
	// root certificates).
	ProfileHTTPSWeb BundleEndpointProfile = "https_web"
	// ProfileHTTPSSPIFFE authenticates the endpoint by its X509-SVID, whose
	// SPIFFE ID must be endpointSPIFFEID.
	ProfileHTTPSSPIFFE BundleEndpointProfile = "https_spiffe"
)

// SpiffeFederationSpec is one federation relationship of the SPIRE server:
// the foreign trust domain and where and how to fetch its bundle.
// +kubebuilder:validation:XValidation:rule="self.bundleEndpointProfile == 'https_spiffe' ? has(self.endpointSPIFFEID) : !has(self.endpointSPIFFEID)",message="endpointSPIFFEID is required with bundleEndpointProfile https_spiffe and not allowed with https_web"
// +kubebuilder:validation:XValidation:rule="self.trustDomain == oldSelf.trustDomain",message="trustDomain is immutable: create a new object for another trust domain"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="className is immutable"
type SpiffeFederationSpec struct {
	// ClassName names the spiffe-operator instance (its --class-name) that
	// takes this object, when several instances (for several SPIRE servers)
	// share a cluster. Unset: the instance without a class name, and those
	// started with --watch-classless. It cannot be changed.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ClassName string `json:"className,omitempty"`

	// TrustDomain is the foreign trust domain to federate with, e.g.
	// "partner.example". It cannot be the SPIRE server's own, and it cannot
	// be changed.
	// +required
	TrustDomain TrustDomainName `json:"trustDomain"`

	// BundleEndpointURL is the https URL of the foreign trust domain's
	// SPIFFE bundle endpoint.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() != ''",message="bundleEndpointURL must be an https URL with a host"
	// +required
	BundleEndpointURL string `json:"bundleEndpointURL"`

	// BundleEndpointProfile is https_web (Web PKI) or https_spiffe (the
	// endpoint presents an X509-SVID with endpointSPIFFEID).
	// +required
	BundleEndpointProfile BundleEndpointProfile `json:"bundleEndpointProfile"`

	// EndpointSPIFFEID is the SPIFFE ID of the bundle endpoint server, for
	// the https_spiffe profile (usually spiffe://<trustDomain>/spire/server).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)+$`
	// +optional
	EndpointSPIFFEID string `json:"endpointSPIFFEID,omitempty"`

	// TrustDomainBundle is the foreign trust domain's bundle to start from:
	// PEM certificates (X.509 authorities only) or a SPIFFE bundle (JWKS
	// JSON). SPIRE needs it to authenticate an https_spiffe endpoint of the
	// foreign trust domain the first time. It is written when the
	// relationship is created and whenever it changes here; in between,
	// SPIRE keeps the bundle up to date from the endpoint. Every X.509
	// authority must be a CA of this trust domain; with https_spiffe and an
	// endpoint in this trust domain there must be one; and one must be
	// valid when the bundle is written.
	// +kubebuilder:validation:MaxLength=262144
	// +optional
	TrustDomainBundle string `json:"trustDomainBundle,omitempty"`
}

// SpiffeFederationStatus reports the federation relationship. Its
// conditions are Processing and Ready, owned by the controller, and
// Conflict while another object or a relationship this operator did not
// create holds the trust domain.
type SpiffeFederationStatus struct {
	status.Common `json:",inline"`

	// RelationshipTrustDomain is the trust domain whose federation
	// relationship this object created and holds in SPIRE; the operator
	// updates and deletes only a relationship recorded here. Empty while
	// it holds none.
	// +optional
	RelationshipTrustDomain string `json:"relationshipTrustDomain,omitempty"`

	// ClaimedTrustDomain is the trust domain whose relationship this
	// object is about to create: recorded before the create, so that a
	// relationship it created is recognised even when the operator stopped
	// before recording it in relationshipTrustDomain. A relationship found
	// under a claim is taken as this object's only if it is exactly the
	// one it would have created.
	// +optional
	ClaimedTrustDomain string `json:"claimedTrustDomain,omitempty"`

	// TrustDomainBundleSHA256 is the SHA-256 (hex) of the spec's
	// trustDomainBundle last written to SPIRE; a change of the spec's
	// bundle writes it again.
	// +optional
	TrustDomainBundleSHA256 string `json:"trustDomainBundleSHA256,omitempty"`
}

// SpiffeFederation makes the SPIRE server federate with a foreign trust
// domain: it creates, updates and deletes one federation relationship.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=sfed,categories=trustplane
// +kubebuilder:printcolumn:name="Trust Domain",type=string,JSONPath=`.spec.trustDomain`
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=`.spec.bundleEndpointProfile`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.spec.bundleEndpointURL`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SpiffeFederation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the federation relationship.
	// +required
	Spec SpiffeFederationSpec `json:"spec"`
	// Status reports the relationship.
	// +optional
	Status SpiffeFederationStatus `json:"status,omitempty"`
}

// CommonStatus implements object.Object.
func (f *SpiffeFederation) CommonStatus() *status.Common { return &f.Status.Common }

// SpiffeFederationList is a list of SpiffeFederations.
//
// +kubebuilder:object:root=true
type SpiffeFederationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the SpiffeFederations.
	Items []SpiffeFederation `json:"items"`
}

// GetItems returns pointers to the items.
func (l *SpiffeFederationList) GetItems() []*SpiffeFederation {
	out := make([]*SpiffeFederation, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func init() {
	SchemeBuilder.Register(&SpiffeFederation{}, &SpiffeFederationList{})
}
