// Package boundary reads whether the identity boundary's admission
// policies (identity-operator/config/policy) are in force: each
// ValidatingAdmissionPolicy the boundary rests on exists, and a binding of
// the same name binds it with the Deny action. Without them whoever may
// create a pod can give it any variant's label, and so its identity; the
// operator cannot enforce that itself, so it reports it on every binding.
package boundary
