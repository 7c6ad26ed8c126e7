// Package testapi defines Widget, a small namespaced kind used by the
// framework's own tests and example: its CRD lives in common/testdata/crd.
//
// +kubebuilder:object:generate=true
// +groupName=test.trustplane.dev
// +versionName=v1
package testapi
