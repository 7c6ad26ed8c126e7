// Package selectortemplate parses and renders workloadSelectorTemplates:
// extra k8s workload attestor selectors of a SpiffeRegistration's entries,
// rendered per workload.
package selectortemplate
