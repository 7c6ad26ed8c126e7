package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/status"
)

// DefaultSpiffeIDTemplate is the SPIFFE ID path template used when a
// SpiffeRegistration sets none: one identity per service account.
const DefaultSpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}"

// SpiffeRegistrationSpec is a registration policy: the workloads it selects
// receive SPIRE entries rendered from its templates.
// +kubebuilder:validation:XValidation:rule="self.parentID.startsWith('spiffe://' + self.trustDomain + '/')",message="parentID must be in trustDomain"
type SpiffeRegistrationSpec struct {
	// TrustDomain is the trust domain of the SPIFFE IDs, the SPIRE server's own.
	// +required
	TrustDomain TrustDomainName `json:"trustDomain"`

	// ParentID is the SPIFFE ID of the agent or node alias the entries hang
	// under, e.g. spiffe://example.org/spire/agent/k8s_psat/cluster.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)+$`
	// +required
	ParentID string `json:"parentID"`

	// SpiffeIDTemplate is the path of the SPIFFE ID, rendered per workload.
	// Literal text plus the variables {namespace}, {serviceAccount}, {kind},
	// {name} and {label:<key>} (a workload label). When it uses {name},
	// {kind} or a label, the entry also carries the workload's
	// spec.selector.matchLabels as k8s:pod-label selectors.
	// +kubebuilder:default="ns/{namespace}/sa/{serviceAccount}"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9._-]|/|\{(namespace|serviceAccount|kind|name|label:[A-Za-z0-9./_-]+)\})+$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.contains('//')",message="spiffeIDTemplate must not start or end with '/' nor contain '//'"
	// +optional
	SpiffeIDTemplate string `json:"spiffeIDTemplate,omitempty"`

	// DNSNameTemplates are DNS SANs for the X509-SVIDs, in the same template
	// language, e.g. "{name}.{namespace}.svc".
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([A-Za-z0-9*._-]|\{(namespace|serviceAccount|kind|name|label:[A-Za-z0-9./_-]+)\})+$`
	// +optional
	DNSNameTemplates []string `json:"dnsNameTemplates,omitempty"`

	EntryOptions `json:",inline"`

	// NamespaceSelector selects the namespaces in scope; unset selects all.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// WorkloadSelector selects workloads by their labels; unset selects all.
	// +optional
	WorkloadSelector *metav1.LabelSelector `json:"workloadSelector,omitempty"`

	// WorkloadKinds are the kinds of workload selected.
	// +kubebuilder:default={Deployment}
	// +kubebuilder:validation:MinItems=1
	// +listType=set
	// +optional
	WorkloadKinds []WorkloadKind `json:"workloadKinds,omitempty"`
}

// SpiffeRegistrationStatus reports what the policy registered. Its
// conditions are Processing and Ready, owned by the controller.
type SpiffeRegistrationStatus struct {
	status.Common `json:",inline"`

	// WorkloadsSelected counts the workloads the policy selects.
	// +optional
	WorkloadsSelected int32 `json:"workloadsSelected"`
	// EntriesDesired counts the distinct entries the workloads need.
	// +optional
	EntriesDesired int32 `json:"entriesDesired"`
	// EntriesRegistered counts the desired entries this policy holds in SPIRE.
	// +optional
	EntriesRegistered int32 `json:"entriesRegistered"`
	// EntriesMasked counts desired entries held by an older object or by an
	// entry this operator did not create.
	// +optional
	EntriesMasked int32 `json:"entriesMasked"`
	// EntriesFailed counts entries that could not be rendered or that SPIRE rejected.
	// +optional
	EntriesFailed int32 `json:"entriesFailed"`

	// LastSyncTime is when the policy last read from or wrote to SPIRE.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`

	// Failures lists the first few failures with their reasons.
	// +kubebuilder:validation:MaxItems=10
	// +optional
	Failures []Failure `json:"failures,omitempty"`

	// ParentIDs are the parent IDs under which this object holds entries in
	// SPIRE. The operator reads them on its first pass, so entries under a
	// parent the spec no longer names (changed while the operator was down)
	// are still found and deleted. It holds one item but for the passes
	// after a parent change.
	// +listType=set
	// +optional
	ParentIDs []string `json:"parentIDs,omitempty"`
}

// SpiffeRegistration registers the workloads it selects with SPIRE.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=sreg,categories=trustplane
// +kubebuilder:printcolumn:name="Trust Domain",type=string,JSONPath=`.spec.trustDomain`
// +kubebuilder:printcolumn:name="Workloads",type=integer,JSONPath=`.status.workloadsSelected`
// +kubebuilder:printcolumn:name="Registered",type=integer,JSONPath=`.status.entriesRegistered`
// +kubebuilder:printcolumn:name="Masked",type=integer,JSONPath=`.status.entriesMasked`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.entriesFailed`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SpiffeRegistration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the policy.
	// +required
	Spec SpiffeRegistrationSpec `json:"spec"`
	// Status is what the operator registered.
	// +optional
	Status SpiffeRegistrationStatus `json:"status,omitempty"`
}

// CommonStatus implements object.Object.
func (r *SpiffeRegistration) CommonStatus() *status.Common { return &r.Status.Common }

// SpiffeRegistrationList is a list of SpiffeRegistrations.
//
// +kubebuilder:object:root=true
type SpiffeRegistrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the SpiffeRegistrations.
	Items []SpiffeRegistration `json:"items"`
}

// GetItems returns pointers to the items.
func (l *SpiffeRegistrationList) GetItems() []*SpiffeRegistration {
	out := make([]*SpiffeRegistration, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func init() {
	SchemeBuilder.Register(&SpiffeRegistration{}, &SpiffeRegistrationList{})
}
