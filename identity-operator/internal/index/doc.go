// Package index names the cache indexes and the labels that let one
// reconcile find the few bindings and outputs it must look at: the
// namespace+service-account group (split by variant, since different
// variants never conflict unless they share a SPIFFE ID), the SPIFFE ID and
// the referenced pool. With them a reconcile costs O(bindings that share its
// namespace, service account and variant, or its SPIFFE ID), not O(bindings
// in the namespace).
package index
