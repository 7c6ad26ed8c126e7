package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// DialMTLS connects to the server's TCP API with the X509-SVID minted into
// svidDir (see MintX509SVID), authorizing the server by its SPIFFE ID.
func (s *Spire) DialMTLS(_ context.Context, svidDir string) (*grpc.ClientConn, error) {
	svid, err := x509svid.Load(filepath.Join(svidDir, "svid.pem"), filepath.Join(svidDir, "key.pem"))
	if err != nil {
		return nil, fmt.Errorf("load svid from %s: %w", svidDir, err)
	}
	td, err := spiffeid.TrustDomainFromString(s.TrustDomain)
	if err != nil {
		return nil, fmt.Errorf("trust domain: %w", err)
	}
	bundle, err := x509bundle.Load(td, filepath.Join(svidDir, "bundle.pem"))
	if err != nil {
		return nil, fmt.Errorf("load bundle from %s: %w", svidDir, err)
	}
	serverID, err := spiffeid.FromString(s.ServerID)
	if err != nil {
		return nil, fmt.Errorf("server id: %w", err)
	}
	tlsConf := tlsconfig.MTLSClientConfig(svid, bundle, tlsconfig.AuthorizeID(serverID))
	conn, err := grpc.NewClient(s.Address, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	if err != nil {
		return nil, fmt.Errorf("dial spire-server at %s: %w", s.Address, err)
	}
	return conn, nil
}
