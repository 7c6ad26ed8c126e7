// Package pool resolves an IdentityBinding's poolRef to the label map of the
// pool's pod selector. InferencePools are read as unstructured objects,
// because the served schema of that API has changed shape between versions;
// Deployments and StatefulSets are read typed. All go through the same
// selector decoder, so every kind obeys the same safety rules.
package pool
