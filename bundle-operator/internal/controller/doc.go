// Package controller wires the TrustBundle handler into a controller-runtime
// manager: the common Controller around the handler, the watches that
// requeue a TrustBundle when one of its targets or namespaces changes, the
// trigger poller, and the cache options that keep targets metadata-only and
// filtered by our label. It holds no business logic.
package controller
