// Package bundle parses, validates, merges and renders CA bundles.
//
// It holds every rule about bundle content in one place:
//
//   - parsing (parse.go): the input is PEM blocks and whitespace only; every
//     block must be a CERTIFICATE without headers that parses, and every
//     "-----BEGIN" line must open a block that decodes. A private key, any
//     other block type, a block that does not decode (also one before a
//     good block) or stray non-whitespace text rejects the whole input;
//   - validation (validate.go): at least one CA must be valid now; a
//     certificate that is not a CA is refused (or dropped on request); two
//     different JWT authorities may not share a key ID;
//   - determinism (bundle.go): certificates are deduplicated by SHA-256 and
//     sorted, so the same input always renders the same bytes;
//   - trust domains (bundle.go): a Domain is one trust domain's authorities,
//     rendered as its own SPIFFE document and never merged with another's;
//   - rendering (render.go): a PEM bundle, a SPIFFE bundle document
//     (go-spiffe's spiffebundle) and a JWKS of the JWT authorities.
package bundle
