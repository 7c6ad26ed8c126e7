// Package target writes a rendered bundle to its targets and keeps them in
// sync with as few writes as possible:
//
//   - ConfigMaps and Secrets of a given name in the selected namespaces
//     (objects.go). They are read from a metadata-only cache filtered by
//     LabelTrustBundle, so memory grows with our targets, not with every
//     ConfigMap of the cluster (except in the source namespaces, whose
//     ConfigMaps are all cached: only the label makes an object ours). A target is in sync when its hash annotation
//     matches and the field manager still owns exactly the data keys it
//     writes (a key changed or removed by hand moves out of the manager's
//     managedFields), so an unchanged bundle writes nothing.
//   - one cluster-scoped ClusterTrustBundle per TrustBundle
//     (clustertrustbundle.go), kept in sync the same way.
//   - the caBundle of every ValidatingWebhookConfiguration,
//     MutatingWebhookConfiguration, APIService and CRD conversion webhook
//     annotated with v1alpha1.InjectAnnotation (inject.go). These are few,
//     so each is read live and compared before writing; one without a
//     caBundle field is skipped and reported, not failed.
//
// Every write is a server-side apply with the field manager FieldManager
// that names only our keys, so keys of others in a shared object survive.
// Ownership is forced only on objects labelled as ours. A ConfigMap or
// Secret target the cache does not hold as ours is written by an apply
// that creates it only where no object of its name exists; an object
// someone else created is never taken over: it is written beside its
// writers' fields without force when some writer owns a field of it, and
// left alone and reported when none does (it would be deleted on release).
package target
