// Package v1alpha1 holds the identity.trustplane.dev/v1alpha1 API: the
// IdentityBinding kind, which asks for one SPIFFE identity for the pods of a
// pool, a service account and an identity boundary (variant).
//
// +kubebuilder:object:generate=true
// +groupName=identity.trustplane.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "identity.trustplane.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this API with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
