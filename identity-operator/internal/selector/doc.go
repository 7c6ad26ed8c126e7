// Package selector turns a pool selector, a namespace, a service account and
// a variant into the SPIRE workload selectors of one identity, and refuses
// any input that would make that identity broader than the pods it names.
//
// The rules follow the selector-safety design: a pool selector must decode
// to a non-empty, stable map of valid label keys and values (matchLabels, or
// a flat map normalised to it); matchExpressions are never rendered. The
// rendered set is deduplicated and sorted and then checked again: it must
// hold the binding's namespace, the service account and exactly one
// boundary selector.
package selector
