package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/status"
)

// Pool kinds an IdentityBinding may reference.
const (
	// InferencePoolGroup is the API group of the Gateway API Inference
	// Extension InferencePool, the default pool kind.
	InferencePoolGroup = "inference.networking.k8s.io"
	// InferencePoolKind is the default pool kind.
	InferencePoolKind = "InferencePool"
	// AppsGroup is the API group of Deployment and StatefulSet.
	AppsGroup = "apps"
	// DeploymentKind selects a Deployment as the pool; its spec.selector is
	// the pool selector.
	DeploymentKind = "Deployment"
	// StatefulSetKind selects a StatefulSet as the pool; its spec.selector is
	// the pool selector.
	StatefulSetKind = "StatefulSet"
)

// BoundaryLabel is the pod label that carries the identity boundary. The
// platform sets it on pods at creation; an admission policy keeps it
// immutable (config/policy).
const BoundaryLabel = "identity.trustplane.dev/variant"

// Failure condition types. At most one of them is present at a time, and
// only while the binding is not Ready.
const (
	// ConditionInvalidRef reports a pool reference that cannot be resolved.
	ConditionInvalidRef = "InvalidRef"
	// ConditionUnsafeSelector reports input that would render a selector set
	// broader than, or different from, the pods the binding names.
	ConditionUnsafeSelector = "UnsafeSelector"
	// ConditionConflict reports a binding that overlaps a peer; conflict
	// members keep no output.
	ConditionConflict = "Conflict"
	// ConditionRenderFailure reports a SPIFFE ID or output that could not be
	// rendered or written.
	ConditionRenderFailure = "RenderFailure"
)

// ConditionBoundaryEnforced reports, on every binding, whether the identity
// boundary's admission policies (config/policy) are in force. It is not a
// failure condition and leaves Ready alone: without the policies the
// binding still renders its outputs, but whoever may create a pod can give
// it the variant label.
const ConditionBoundaryEnforced = "BoundaryEnforced"

// Reasons of BoundaryEnforced.
const (
	// ReasonAdmissionPoliciesInForce: every policy is installed and bound
	// with the Deny action.
	ReasonAdmissionPoliciesInForce = "AdmissionPoliciesInForce"
	// ReasonAdmissionPoliciesMissing: a policy or its binding is missing,
	// or the binding does not deny; the message names them.
	ReasonAdmissionPoliciesMissing = "AdmissionPoliciesMissing"
	// ReasonAdmissionPoliciesUnreadable (status Unknown): the operator
	// could not read the policies for several intervals in a row.
	ReasonAdmissionPoliciesUnreadable = "AdmissionPoliciesUnreadable"
)

// Reasons of the failure conditions (and of Ready=False).
const (
	// ReasonTargetPoolNotFound (InvalidRef): the referenced pool does not exist.
	ReasonTargetPoolNotFound = "TargetPoolNotFound"
	// ReasonInferencePoolCRDMissing (InvalidRef): the InferencePool CRD is
	// not installed; retried slowly.
	ReasonInferencePoolCRDMissing = "InferencePoolCRDMissing"
	// ReasonUnsupportedPoolKind (InvalidRef): poolRef names a kind other than
	// InferencePool, Deployment or StatefulSet.
	ReasonUnsupportedPoolKind = "UnsupportedPoolKind"
	// ReasonInvalidPoolSelector (UnsafeSelector): the pool selector is empty,
	// malformed, uses matchExpressions or cannot be decoded to a stable map.
	ReasonInvalidPoolSelector = "InvalidPoolSelector"
	// ReasonInvalidIdentityBoundary (UnsafeSelector): the variant is missing,
	// is not a valid label value, or the pool selects a different variant.
	ReasonInvalidIdentityBoundary = "InvalidIdentityBoundary"
	// ReasonInvalidServiceAccount (UnsafeSelector): serviceAccountName is
	// missing or not a valid service account name.
	ReasonInvalidServiceAccount = "InvalidServiceAccount"
	// ReasonSelectorInvariantViolated (UnsafeSelector): the rendered set
	// lacks the binding's namespace selector (a guard that should never fire).
	ReasonSelectorInvariantViolated = "SelectorInvariantViolated"
	// ReasonVariantConflict (Conflict): a peer with the same namespace,
	// service account and variant has a different SPIFFE ID.
	ReasonVariantConflict = "VariantConflict"
	// ReasonDuplicateSPIFFEID (Conflict): a peer renders the same SPIFFE ID.
	ReasonDuplicateSPIFFEID = "DuplicateSPIFFEID"
	// ReasonInvalidSPIFFEIDTemplate (RenderFailure): the path template does
	// not render a valid SPIFFE ID path.
	ReasonInvalidSPIFFEIDTemplate = "InvalidSPIFFEIDTemplate"
	// ReasonSPIFFEIDOutsideServiceAccount (RenderFailure): the rendered path
	// does not start with the whole segments
	// ns/<binding namespace>/sa/<service account>/, so it could claim an
	// identity of another namespace or service account.
	ReasonSPIFFEIDOutsideServiceAccount = "SPIFFEIDOutsideServiceAccount"
	// ReasonSVIDTTLTooLong (RenderFailure): x509SVIDTTL or jwtSVIDTTL is
	// longer than the operator's --max-svid-ttl.
	ReasonSVIDTTLTooLong = "SVIDTTLTooLong"
	// ReasonInvalidSVIDTTL (RenderFailure): x509SVIDTTL or jwtSVIDTTL is
	// negative or not a whole number of seconds. SPIRE takes whole seconds
	// and reads 0 as its own default, so a TTL under a second would silently
	// become the server's default lifetime.
	ReasonInvalidSVIDTTL = "InvalidSVIDTTL"
	// ReasonManagedOutputApplyFailed (RenderFailure): the output could not be
	// written, for example because an object of the same name that the
	// operator did not create is in the way.
	ReasonManagedOutputApplyFailed = "ManagedOutputApplyFailed"
	// ReasonPeerOutputPending (Ready=False only): a former conflict peer's
	// output still exists; output is recreated once it is gone.
	ReasonPeerOutputPending = "PeerOutputPending"
	// ReasonPoolCacheNotSynced (Ready=False only): the operator's cache of
	// the pool's kind has not synced; the pass is retried and the outputs
	// are kept.
	ReasonPoolCacheNotSynced = "PoolCacheNotSynced"
	// ReasonOperatorForbidden (Ready=False only): the operator's own
	// permissions (its role) do not allow a write of the output; the
	// message names the verb and resource to grant. The refusal says
	// nothing of the binding's spec, so the outputs are kept and the pass
	// is retried.
	ReasonOperatorForbidden = "OperatorForbidden"
)

// PoolReference names the pool, in the binding's namespace, whose pods the
// binding gives an identity. Admission refuses a group that does not go with
// the kind; the operator still reports UnsupportedPoolKind for objects
// stored before this validation existed.
//
// +kubebuilder:validation:XValidation:rule="!has(self.group) || size(self.group) == 0 || self.group == ((has(self.kind) ? self.kind : 'InferencePool') == 'InferencePool' ? 'inference.networking.k8s.io' : 'apps')",message="poolRef.group must be inference.networking.k8s.io for InferencePool and apps for Deployment and StatefulSet (or empty)"
type PoolReference struct {
	// Group is the API group of the pool. Empty means the group of Kind:
	// inference.networking.k8s.io for InferencePool, apps for Deployment and
	// StatefulSet.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// Kind is the kind of the pool: InferencePool (default), Deployment or
	// StatefulSet.
	// +kubebuilder:default=InferencePool
	// +kubebuilder:validation:Enum=InferencePool;Deployment;StatefulSet
	// +optional
	Kind string `json:"kind,omitempty"`
	// Name is the name of the pool: a DNS-1123 subdomain, as the names of
	// all three pool kinds are.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// Resolved returns the reference with the defaults applied: Kind
// InferencePool when empty, and the group that goes with the kind when Group
// is empty.
func (r PoolReference) Resolved() PoolReference {
	if r.Kind == "" {
		r.Kind = InferencePoolKind
	}
	if r.Group == "" {
		switch r.Kind {
		case InferencePoolKind:
			r.Group = InferencePoolGroup
		case DeploymentKind, StatefulSetKind:
			r.Group = AppsGroup
		}
	}
	return r
}

// IdentityBoundary separates workloads that share a namespace and service
// account.
type IdentityBoundary struct {
	// Variant is the value of the pod label identity.trustplane.dev/variant
	// that the rendered identity requires. It must be a valid label value;
	// an empty or invalid variant is reported as UnsafeSelector.
	// +optional
	Variant string `json:"variant,omitempty"`
}

// IdentityBindingSpec is the desired identity.
type IdentityBindingSpec struct {
	// PoolRef names the pool whose selector the identity is limited to.
	PoolRef PoolReference `json:"poolRef"`
	// ServiceAccountName is the service account the pods run as: a DNS-1123
	// subdomain, as Kubernetes requires of service account names.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ServiceAccountName string `json:"serviceAccountName"`
	// IdentityBoundary holds the variant that separates this workload from
	// others of the same namespace and service account. The variant is
	// checked by the operator, not at admission, so that a missing or
	// invalid one is reported as UnsafeSelector/InvalidIdentityBoundary on
	// the binding, as the selector-safety rules require.
	IdentityBoundary IdentityBoundary `json:"identityBoundary"`
	// SPIFFEIDPathTemplate is the path of the SPIFFE ID within the operator's
	// trust domain. Placeholders: {namespace}, {serviceAccount}, {pool},
	// {variant}. Default: ns/{namespace}/sa/{serviceAccount}/pool/{pool}/variant/{variant}.
	// The rendered path must start with the whole segments
	// ns/<binding namespace>/sa/<serviceAccountName>/ and go on after them;
	// otherwise the binding reports RenderFailure/SPIFFEIDOutsideServiceAccount.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	SPIFFEIDPathTemplate string `json:"spiffeIDPathTemplate,omitempty"`
	// X509SVIDTTL is the lifetime of X509-SVIDs; empty uses SPIRE's default.
	// Longer than the operator's --max-svid-ttl (default 24h) is refused
	// with RenderFailure/SVIDTTLTooLong.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="x509SVIDTTL must not be negative"
	// +optional
	X509SVIDTTL *metav1.Duration `json:"x509SVIDTTL,omitempty"`
	// JWTSVIDTTL is the lifetime of JWT-SVIDs; empty uses SPIRE's default.
	// Longer than the operator's --max-svid-ttl (default 24h) is refused
	// with RenderFailure/SVIDTTLTooLong.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="jwtSVIDTTL must not be negative"
	// +optional
	JWTSVIDTTL *metav1.Duration `json:"jwtSVIDTTL,omitempty"`
	// Hint is passed to the entry so workloads with several identities can
	// tell them apart.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Hint string `json:"hint,omitempty"`
}

// Conflict names a peer binding this binding overlaps with.
type Conflict struct {
	// Peer is the peer binding as namespace/name.
	Peer string `json:"peer"`
	// Cause is VariantConflict or DuplicateSPIFFEID.
	Cause string `json:"cause"`
	// PeerSPIFFEID is the SPIFFE ID the peer renders.
	// +optional
	PeerSPIFFEID string `json:"peerSPIFFEID,omitempty"`
	// PeerVariant is the peer's identityBoundary.variant.
	// +optional
	PeerVariant string `json:"peerVariant,omitempty"`
}

// OutputReference names an object the operator wrote for the binding.
type OutputReference struct {
	// APIVersion of the output.
	APIVersion string `json:"apiVersion"`
	// Kind of the output.
	Kind string `json:"kind"`
	// Name of the output (cluster-scoped).
	Name string `json:"name"`
}

// IdentityBindingStatus is the observed state. Its conditions are
// Processing, Ready and at most one of InvalidRef, UnsafeSelector, Conflict
// and RenderFailure.
type IdentityBindingStatus struct {
	status.Common `json:",inline"`
	// SPIFFEID is the SPIFFE ID of the binding's outputs; set only while
	// the binding is Ready.
	// +optional
	SPIFFEID string `json:"spiffeID,omitempty"`
	// Selectors is the rendered, sorted selector set.
	// +optional
	Selectors []string `json:"selectors,omitempty"`
	// SelectorFingerprint is "sha256:" and the hex SHA-256 of Selectors
	// joined by newlines: equal fingerprints mean equal selector sets.
	// +optional
	SelectorFingerprint string `json:"selectorFingerprint,omitempty"`
	// Conflicts lists the peers this binding conflicts with: the first 20
	// by peer; the Conflict condition's message counts them all.
	// +optional
	Conflicts []Conflict `json:"conflicts,omitempty"`
	// Outputs are the objects the operator keeps for this binding; empty
	// while it is not Ready.
	// +optional
	Outputs []OutputReference `json:"outputs,omitempty"`
}

// IdentityBinding asks for a SPIFFE identity for the pods of one pool,
// service account and variant in its namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ib
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Variant",type=string,JSONPath=`.spec.identityBoundary.variant`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="SPIFFE ID",type=string,JSONPath=`.status.spiffeID`
type IdentityBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired identity.
	Spec IdentityBindingSpec `json:"spec,omitempty"`
	// Status is the observed state, written by the operator.
	Status IdentityBindingStatus `json:"status,omitempty"`
}

// CommonStatus implements object.Object.
func (b *IdentityBinding) CommonStatus() *status.Common { return &b.Status.Common }

// +kubebuilder:object:root=true

// IdentityBindingList is a list of IdentityBindings.
type IdentityBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the bindings.
	Items []IdentityBinding `json:"items"`
}

// GetItems returns pointers to the items.
func (l *IdentityBindingList) GetItems() []*IdentityBinding {
	out := make([]*IdentityBinding, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func init() {
	SchemeBuilder.Register(&IdentityBinding{}, &IdentityBindingList{})
}
