package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/status"
)

// SpiffeEntrySpec is one explicit SPIRE registration entry.
// +kubebuilder:validation:XValidation:rule="self.spiffeID.split('/')[2] == self.parentID.split('/')[2]",message="spiffeID and parentID must be in the same trust domain"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="className is immutable"
type SpiffeEntrySpec struct {
	// ClassName names the spiffe-operator instance (its --class-name) that
	// takes this object, when several instances (for several SPIRE servers)
	// share a cluster. Unset: the instance without a class name, and those
	// started with --watch-classless. It cannot be changed: create a new
	// object to move entries to another instance.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ClassName string `json:"className,omitempty"`

	// SpiffeID is the identity the entry issues.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)+$`
	// +required
	SpiffeID string `json:"spiffeID"`

	// ParentID is the SPIFFE ID of the agent or node alias that may issue it.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)+$`
	// +required
	ParentID string `json:"parentID"`

	// Selectors are "type:value" selectors, e.g. "k8s:ns:prod"; all must match.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_-]+:.+$`
	// +listType=set
	// +required
	Selectors []string `json:"selectors"`

	// DNSNames are DNS SANs of the X509-SVIDs.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9*._-]+$`
	// +listType=set
	// +optional
	DNSNames []string `json:"dnsNames,omitempty"`

	EntryOptions `json:",inline"`
}

// SpiffeEntryStatus reports the SPIRE entry. Its conditions are Processing
// and Ready, owned by the controller, and Masked when an older object or a
// foreign entry already holds this entry.
type SpiffeEntryStatus struct {
	status.Common `json:",inline"`

	// EntryID is the ID of the SPIRE entry this object holds.
	// +optional
	EntryID string `json:"entryID,omitempty"`

	// ParentIDs are the parent IDs under which this object holds entries in
	// SPIRE. The operator reads them on its first pass, so entries under a
	// parent the spec no longer names (changed while the operator was down)
	// are still found and deleted. It holds one item but for the passes
	// after a parent change.
	// +listType=set
	// +optional
	ParentIDs []string `json:"parentIDs,omitempty"`
}

// SpiffeEntry is one explicit SPIRE registration entry: for workloads
// outside the cluster, node aliases, and the output of identity-operator.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=sent,categories=trustplane
// +kubebuilder:printcolumn:name="SPIFFE ID",type=string,JSONPath=`.spec.spiffeID`
// +kubebuilder:printcolumn:name="Entry ID",type=string,JSONPath=`.status.entryID`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SpiffeEntry struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the entry.
	// +required
	Spec SpiffeEntrySpec `json:"spec"`
	// Status reports the SPIRE entry.
	// +optional
	Status SpiffeEntryStatus `json:"status,omitempty"`
}

// CommonStatus implements object.Object.
func (e *SpiffeEntry) CommonStatus() *status.Common { return &e.Status.Common }

// SpiffeEntryList is a list of SpiffeEntries.
//
// +kubebuilder:object:root=true
type SpiffeEntryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the SpiffeEntries.
	Items []SpiffeEntry `json:"items"`
}

// GetItems returns pointers to the items.
func (l *SpiffeEntryList) GetItems() []*SpiffeEntry {
	out := make([]*SpiffeEntry, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func init() {
	SchemeBuilder.Register(&SpiffeEntry{}, &SpiffeEntryList{})
}
