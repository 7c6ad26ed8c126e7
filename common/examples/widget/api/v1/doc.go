// Package v1 defines Widget, the namespaced kind of the example operator
// (test.trustplane.dev/v1): a list of ConfigMap names to keep. The
// framework's own tests reconcile it too; its CRD lives in
// common/testdata/crd.
//
// +kubebuilder:object:generate=true
// +groupName=test.trustplane.dev
// +versionName=v1
package v1
