// Package conflict holds the pairwise conflict rules between
// IdentityBindings. The rules are deterministic and symmetric, so both
// members of a pair reach the same verdict and record it on their own side:
//
//  1. same SPIFFE ID: DuplicateSPIFFEID;
//  2. otherwise, different namespace or service account: no conflict;
//  3. otherwise, different variant: no conflict (the boundary label keeps
//     their pods apart);
//  4. otherwise: VariantConflict.
//
// Only bindings that share a namespace, service account and variant, or a
// SPIFFE ID, can conflict, which is why the handler looks peers up through
// those two indexes instead of scanning the namespace.
package conflict
