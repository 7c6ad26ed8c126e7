package controller

import (
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
)

// NewPeerHandler returns the handler Setup puts on the IdentityBinding
// watch beside the binding's own, reading bindings (through the indexes
// Setup registers) from r.
func NewPeerHandler(r client.Reader, td spiffeid.TrustDomain) handler.EventHandler {
	return &peerHandler{m: &mapper{client: r, td: td}}
}
