// Package template is the small template language of SpiffeRegistration's
// spiffeIDTemplate and dnsNameTemplates: literal text plus the variables
// {namespace}, {serviceAccount}, {kind}, {name} and {label:<key>}.
//
// A template is parsed once (Parse) and rendered per workload (Render).
// Rendering fails, rather than producing a shorter or broader result, when a
// label is missing or a value is empty: an identity is never made up from a
// partial template.
package template
