package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/status"
)

// DefaultSpiffeIDTemplate is the SPIFFE ID path template used when a
// SpiffeRegistration sets none: one identity per service account.
const DefaultSpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}"

// DefaultIgnoreNamespaces returns the namespaces a SpiffeRegistration never
// selects unless its ignoreNamespaces says otherwise: Kubernetes' own and
// SPIRE's usual ones (the CRD's default of the field).
func DefaultIgnoreNamespaces() []string {
	return []string{"kube-system", "kube-public", "kube-node-lease", "spire-system", "spire-server"}
}

// NamespaceNameLabel is the label the API server sets on every namespace to
// its name; no one can give a namespace another value.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// DefaultParentIDTemplate is the parent ID path template used when a
// SpiffeRegistration sets neither parentID nor parentIDTemplate: the ID of
// the k8s_psat-attested SPIRE agent of the node that runs the pods.
const DefaultParentIDTemplate = "spire/agent/k8s_psat/{clusterName}/{nodeUID}"

// EntryGranularity says how many entries a SpiffeRegistration registers per
// identity.
// +kubebuilder:validation:Enum=Identity;Pod
type EntryGranularity string

const (
	// EntryPerIdentity registers one entry per rendered identity (per node
	// with per-node parents), matching every pod of the workload.
	EntryPerIdentity EntryGranularity = "Identity"
	// EntryPerPod registers one entry per running pod, with the pod's
	// k8s:pod-uid selector.
	EntryPerPod EntryGranularity = "Pod"
)

// SpiffeRegistrationSpec is a registration policy: the workloads it selects
// receive SPIRE entries rendered from its templates.
// +kubebuilder:validation:XValidation:rule="!has(self.parentID) || self.parentID.startsWith('spiffe://' + self.trustDomain + '/')",message="parentID must be in trustDomain"
// +kubebuilder:validation:XValidation:rule="!(has(self.parentID) && has(self.parentIDTemplate))",message="set parentID (one fixed parent) or parentIDTemplate (a parent per node), not both"
// +kubebuilder:validation:XValidation:rule="!((has(self.admin) && self.admin) || (has(self.downstream) && self.downstream)) || (has(self.serviceAccountName) && has(self.namespaceSelector) && has(self.namespaceSelector.matchLabels) && 'kubernetes.io/metadata.name' in self.namespaceSelector.matchLabels)",message="admin and downstream need a policy that selects one namespace by name (namespaceSelector.matchLabels of kubernetes.io/metadata.name) and one serviceAccountName"
// +kubebuilder:validation:XValidation:rule="has(self.podSelector) ? !self.spiffeIDTemplate.matches('[{](kind|name)[}]') && (!has(self.dnsNameTemplates) || self.dnsNameTemplates.all(t, !t.matches('[{](kind|name)[}]'))) : !self.spiffeIDTemplate.matches('[{](podName|ownerKind|ownerName|nodeName|clusterName|trustDomain|annotation:[^}]*)[}]') && (!has(self.dnsNameTemplates) || self.dnsNameTemplates.all(t, !t.matches('[{](podName|ownerKind|ownerName|nodeName|clusterName|trustDomain|annotation:[^}]*)[}]')))",message="templates of a policy with podSelector may not use {kind} or {name} (use {ownerKind}, {ownerName}, {podName}); pod variables ({podName}, {ownerKind}, {ownerName}, {nodeName}, {clusterName}, {trustDomain}, {annotation:...}) need podSelector"
// +kubebuilder:validation:XValidation:rule="has(self.className) == has(oldSelf.className) && (!has(self.className) || self.className == oldSelf.className)",message="className is immutable"
// +kubebuilder:validation:XValidation:rule="!(has(self.podSelector) && has(self.workloadSelector))",message="workloadSelector does not apply to a policy of pods (podSelector): select the pods by podSelector"
type SpiffeRegistrationSpec struct {
	// ClassName names the spiffe-operator instance (its --class-name) that
	// takes this object, when several instances (for several SPIRE servers)
	// share a cluster. Unset: the instance without a class name, and those
	// started with --watch-classless. It cannot be changed: create a new
	// object to move entries to another instance.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ClassName string `json:"className,omitempty"`

	// TrustDomain is the trust domain of the SPIFFE IDs, the SPIRE server's own.
	// +required
	TrustDomain TrustDomainName `json:"trustDomain"`

	// ParentID is one fixed SPIFFE ID, of an agent or (usually) a node
	// alias, that every entry hangs under, e.g.
	// spiffe://example.org/k8s-cluster/prod: every agent of the alias may
	// then issue every selected workload's SVIDs. Unset (the default), each
	// entry hangs under the agent of a node that runs the workload's pods,
	// rendered from parentIDTemplate.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^spiffe://[a-z0-9._-]+(/[A-Za-z0-9._-]+)+$`
	// +optional
	ParentID string `json:"parentID,omitempty"`

	// ParentIDTemplate is the path of the parent ID of each (workload, node)
	// entry when parentID is unset, rendered per node that runs the
	// workload's pods: literal text plus {nodeName}, {nodeUID} (from the
	// Node object), {clusterName} (the operator's --cluster-name) and
	// {trustDomain}. It must name the node ({nodeName} or {nodeUID}).
	// Unset means spire/agent/k8s_psat/{clusterName}/{nodeUID}, the ID of
	// the node's k8s_psat-attested agent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9._-]|/|\{(nodeName|nodeUID|clusterName|trustDomain)\})+$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.contains('//')",message="parentIDTemplate must not start or end with '/' nor contain '//'"
	// +kubebuilder:validation:XValidation:rule="self.contains('{nodeName}') || self.contains('{nodeUID}')",message="parentIDTemplate must name the node ({nodeName} or {nodeUID}); use parentID for one fixed parent"
	// +optional
	ParentIDTemplate string `json:"parentIDTemplate,omitempty"`

	// SpiffeIDTemplate is the path of the SPIFFE ID, rendered per workload.
	// Literal text plus the variables {namespace}, {serviceAccount}, {kind},
	// {name} and {label:<key>} (a workload label). When it uses {name},
	// {kind} or a label, the entry also carries the workload's
	// spec.selector.matchLabels as k8s:pod-label selectors.
	// +kubebuilder:default="ns/{namespace}/sa/{serviceAccount}"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^([A-Za-z0-9._-]|/|\{(namespace|serviceAccount|kind|name|label:[A-Za-z0-9./_-]+|podName|ownerKind|ownerName|nodeName|clusterName|trustDomain|annotation:[A-Za-z0-9./_-]+)\})+$`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.contains('//')",message="spiffeIDTemplate must not start or end with '/' nor contain '//'"
	// +optional
	SpiffeIDTemplate string `json:"spiffeIDTemplate,omitempty"`

	// DNSNameTemplates are DNS SANs for the X509-SVIDs, in the same template
	// language, e.g. "{name}.{namespace}.svc".
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^([A-Za-z0-9*._-]|\{(namespace|serviceAccount|kind|name|label:[A-Za-z0-9./_-]+|podName|ownerKind|ownerName|nodeName|clusterName|trustDomain|annotation:[A-Za-z0-9./_-]+)\})+$`
	// +optional
	DNSNameTemplates []string `json:"dnsNameTemplates,omitempty"`

	// AutoPopulateDNSNames adds to each entry <service>.<namespace>.svc for
	// every Service of the workload's namespace whose selector selects its
	// pods (by the workload's spec.selector.matchLabels; with podSelector,
	// by the pod's labels).
	// +optional
	AutoPopulateDNSNames bool `json:"autoPopulateDNSNames,omitempty"`

	// Fallback makes this a policy of last resort: it registers a workload
	// (or, with podSelector, a pod) only while no other policy of the same
	// kind of selection (workloads or pods) and class selects it.
	// +optional
	Fallback bool `json:"fallback,omitempty"`

	// EntryGranularity is Identity (one entry per identity, and node with
	// per-node parents) or Pod: one entry per running pod of the workload,
	// with its k8s:pod-uid selector, created when the pod is (with per-node
	// parents, when it is bound to a node) and deleted when it is gone.
	// +kubebuilder:default=Identity
	// +optional
	EntryGranularity EntryGranularity `json:"entryGranularity,omitempty"`

	// WorkloadSelectorTemplates are extra selectors of every entry, in the
	// k8s workload attestor's syntax k8s:<type>:<value>, the value in the
	// template language of spiffeIDTemplate, e.g. "k8s:container-name:app"
	// or "k8s:pod-label:tier:{label:tier}". Types: container-name,
	// container-image, pod-label, pod-owner, pod-image, pod-init-image,
	// node-name. SPIRE needs every selector of an entry to match, so they
	// only narrow which pods get the identity.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^k8s:(container-name|container-image|pod-label|pod-owner|pod-image|pod-init-image|node-name):([A-Za-z0-9*._/:@-]|\{(namespace|serviceAccount|kind|name|label:[A-Za-z0-9./_-]+)\})+$`
	// +listType=set
	// +optional
	WorkloadSelectorTemplates []string `json:"workloadSelectorTemplates,omitempty"`

	EntryOptions `json:",inline"`

	// IgnoreNamespaces names namespaces the policy never selects, whatever
	// their labels: checked before namespaceSelector. Unset means
	// kube-system, kube-public, kube-node-lease, spire-system and
	// spire-server; an empty list ignores none.
	// +kubebuilder:default={kube-system,kube-public,kube-node-lease,spire-system,spire-server}
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +listType=set
	// +optional
	IgnoreNamespaces []string `json:"ignoreNamespaces"`

	// NamespaceSelector selects the namespaces in scope; unset selects all.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// PodSelector, when set, makes this a policy of pods: it selects the
	// running pods of the selected namespaces by their own labels, whatever
	// created them (Jobs, CronJobs, bare pods, custom controllers), instead
	// of workloads (workloadKinds is not used; admission refuses
	// workloadSelector; serviceAccountName narrows the pods). Every
	// selected pod gets an entry of its own, with its k8s:pod-uid selector,
	// and the templates may use {podName}, {ownerKind}, {ownerName} (the
	// pod's controller), {nodeName}, {annotation:<key>}, {clusterName} and
	// {trustDomain}, with {label:<key>} reading the pod's labels.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`

	// WorkloadSelector selects workloads by their labels; unset selects all.
	// +optional
	WorkloadSelector *metav1.LabelSelector `json:"workloadSelector,omitempty"`

	// ServiceAccountName, when set, selects only the workloads whose pods
	// run as this service account. A policy granting admin or downstream
	// must set it and select one namespace by name.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

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
	// are still found and deleted. With spec.parentID it holds that parent
	// (and the previous one too, for the passes after a parent change);
	// with per-node parents, the parent of each node it holds entries for.
	// +listType=set
	// +optional
	ParentIDs []string `json:"parentIDs,omitempty"`

	// KeptEntries are the entries that workloads whose render fails keep
	// from their last good render, so that an operator restart (which
	// forgets last good renders) does not take their identity away when
	// their pods are replaced. Only failing workloads have one, and only
	// the first 100 by kind, namespace and name are recorded.
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=kind
	// +listMapKey=namespace
	// +listMapKey=name
	// +optional
	KeptEntries []KeptEntry `json:"keptEntries,omitempty"`
}

// KeptEntry is the entry a workload whose render fails keeps from its last
// good render. It is written by the operator: a workload re-created under
// the same name (another UID) does not keep it, and it never carries a
// grant the policy no longer makes.
type KeptEntry struct {
	// Kind of the workload.
	Kind WorkloadKind `json:"kind"`
	// Namespace of the workload.
	Namespace string `json:"namespace"`
	// Name of the workload.
	Name string `json:"name"`
	// UID of the workload.
	UID types.UID `json:"uid"`
	// SpiffeID of the entry.
	SpiffeID string `json:"spiffeID"`
	// ParentID of the entry; empty with per-node parents, where the pods'
	// nodes give it.
	// +optional
	ParentID string `json:"parentID,omitempty"`
	// Selectors of the entry, each "type:value".
	Selectors []string `json:"selectors"`
	// DNSNames of the entry.
	// +optional
	DNSNames []string `json:"dnsNames,omitempty"`
	// X509SVIDTTL is the entry's X.509-SVID TTL in seconds (0: SPIRE's default).
	// +optional
	X509SVIDTTL int32 `json:"x509SVIDTTL,omitempty"`
	// JWTSVIDTTL is the entry's JWT-SVID TTL in seconds (0: SPIRE's default).
	// +optional
	JWTSVIDTTL int32 `json:"jwtSVIDTTL,omitempty"`
	// Hint of the entry.
	// +optional
	Hint string `json:"hint,omitempty"`
	// Admin is the entry's admin grant.
	// +optional
	Admin bool `json:"admin,omitempty"`
	// Downstream is the entry's downstream grant.
	// +optional
	Downstream bool `json:"downstream,omitempty"`
	// FederatesWith are the trust domains the entry federates with.
	// +optional
	FederatesWith []string `json:"federatesWith,omitempty"`
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
