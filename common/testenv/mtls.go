package testenv

import (
	"context"
	"path/filepath"

	"google.golang.org/grpc"

	"github.com/trustplane/trustplane/common/spireconn"
)

// DialMTLS connects to the server's TCP API with the X509-SVID minted into
// svidDir (see MintX509SVID), authorizing the server by its SPIFFE ID, the
// way an operator started with the --svid-cert-file trio does.
func (s *Spire) DialMTLS(ctx context.Context, svidDir string) (*grpc.ClientConn, error) {
	conn, _, err := spireconn.Dial(ctx, spireconn.Options{
		Address:      s.Address,
		ServerID:     s.ServerID,
		SVIDCertFile: filepath.Join(svidDir, "svid.pem"),
		SVIDKeyFile:  filepath.Join(svidDir, "key.pem"),
		BundleFile:   filepath.Join(svidDir, "bundle.pem"),
	})
	// With SVID files the connection is the only thing to close.
	return conn, err
}
