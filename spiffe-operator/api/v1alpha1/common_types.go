package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkloadKind is a kind of workload a SpiffeRegistration can select.
// +kubebuilder:validation:Enum=Deployment;StatefulSet;DaemonSet
type WorkloadKind string

// The workload kinds a SpiffeRegistration can select.
const (
	// WorkloadKindDeployment selects apps/v1 Deployments.
	WorkloadKindDeployment WorkloadKind = "Deployment"
	// WorkloadKindStatefulSet selects apps/v1 StatefulSets.
	WorkloadKindStatefulSet WorkloadKind = "StatefulSet"
	// WorkloadKindDaemonSet selects apps/v1 DaemonSets.
	WorkloadKindDaemonSet WorkloadKind = "DaemonSet"
)

// EntryOptions are the fields of a SPIRE entry that do not decide which
// workloads receive it; a change to any of them is applied in place.
type EntryOptions struct {
	// X509SVIDTTL is the lifetime of the X509-SVIDs minted for the entry.
	// Zero means the SPIRE server's default.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('596523h')",message="x509SVIDTTL must be between 0s and 596523h"
	// +optional
	X509SVIDTTL *metav1.Duration `json:"x509SVIDTTL,omitempty"`

	// JWTSVIDTTL is the lifetime of the JWT-SVIDs minted for the entry.
	// Zero or unset means the SPIRE server's default.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('596523h')",message="jwtSVIDTTL must be between 0s and 596523h"
	// +optional
	JWTSVIDTTL *metav1.Duration `json:"jwtSVIDTTL,omitempty"`

	// FederatesWith lists the trust domains whose bundles the workload
	// receives, e.g. "partner.example".
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	FederatesWith []TrustDomainName `json:"federatesWith,omitempty"`

	// Hint is a free-form hint passed to the workload to tell its SVIDs apart.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Hint string `json:"hint,omitempty"`

	// Admin grants the workload admin access to the SPIRE server APIs.
	// +optional
	Admin bool `json:"admin,omitempty"`

	// Downstream lets the workload mint SVIDs as a downstream SPIRE server.
	// +optional
	Downstream bool `json:"downstream,omitempty"`
}

// TrustDomainName is a SPIFFE trust domain name: lower-case letters, digits,
// dots, dashes and underscores.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=255
// +kubebuilder:validation:Pattern=`^[a-z0-9._-]+$`
type TrustDomainName string

// Failure names one entry or workload that could not be registered.
type Failure struct {
	// Object names what failed: a workload ("Deployment default/web") or a
	// SPIFFE ID.
	Object string `json:"object"`
	// Reason is a CamelCase reason, e.g. InvalidArgument or InvalidSpiffeIDTemplate.
	Reason string `json:"reason"`
	// Message says what went wrong, naming the field at fault.
	Message string `json:"message"`
}
