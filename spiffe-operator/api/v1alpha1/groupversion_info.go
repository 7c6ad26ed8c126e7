// Package v1alpha1 holds the spiffe.trustplane.dev/v1alpha1 API: the
// SpiffeRegistration policy, which registers the workloads it selects with
// SPIRE, and the SpiffeEntry, one explicit SPIRE registration entry.
//
// +kubebuilder:object:generate=true
// +groupName=spiffe.trustplane.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "spiffe.trustplane.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this API with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
