// Package bundle parses, validates, merges and renders CA bundles.
//
// It holds every rule about bundle content in one place:
//
//   - parsing (parse.go): every PEM block must be a CERTIFICATE without
//     headers that parses; a private key, any other block type or stray
//     non-whitespace text rejects the whole input;
//   - validation (validate.go): at least one CA must be valid now;
//   - determinism (bundle.go): certificates are deduplicated by SHA-256 and
//     sorted, so the same input always renders the same bytes;
//   - rendering (render.go): a PEM bundle, a SPIFFE bundle document
//     (go-spiffe's spiffebundle) and a JWKS of the JWT authorities.
package bundle
