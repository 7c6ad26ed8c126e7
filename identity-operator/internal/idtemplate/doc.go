// Package idtemplate renders the SPIFFE ID of an IdentityBinding from its
// path template, inside the operator's trust domain. A binding can choose
// the path but never the trust domain.
package idtemplate
