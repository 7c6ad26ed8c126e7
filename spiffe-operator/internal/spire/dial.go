package spire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffegrpc/grpccredentials"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ConnectOptions say how to reach the SPIRE server. Set exactly one of
// SocketPath (admin Unix socket) and Address (mTLS over TCP).
type ConnectOptions struct {
	// SocketPath is the server's admin Unix socket.
	SocketPath string
	// Address is the server's host:port for mTLS.
	Address string
	// ServerID is the SPIFFE ID the server must present over mTLS,
	// usually spiffe://<trust domain>/spire/server.
	ServerID string
	// WorkloadAPISocket is the Workload API address ("unix:///run/spire/agent.sock")
	// the operator's own X509-SVID and bundle come from.
	WorkloadAPISocket string
	// SVIDCertFile, SVIDKeyFile and BundleFile are PEM files to use instead
	// of the Workload API (a minted admin SVID, e.g. for tests or bootstrap).
	SVIDCertFile string
	// SVIDKeyFile is the PEM private key of SVIDCertFile.
	SVIDKeyFile string
	// BundleFile is the PEM X.509 bundle of the server's trust domain.
	BundleFile string
}

// Validate reports an incomplete or ambiguous connection setting.
func (o ConnectOptions) Validate() error {
	switch {
	case o.SocketPath != "" && o.Address != "":
		return errors.New("set either spire-socket or spire-address, not both")
	case o.SocketPath == "" && o.Address == "":
		return errors.New("set spire-socket (admin Unix socket) or spire-address (mTLS)")
	case o.SocketPath != "":
		return nil
	}
	if _, err := spiffeid.FromString(o.ServerID); err != nil {
		return fmt.Errorf("spire-server-id %q: %w", o.ServerID, err)
	}
	files := o.SVIDCertFile != "" || o.SVIDKeyFile != "" || o.BundleFile != ""
	if files && (o.SVIDCertFile == "" || o.SVIDKeyFile == "" || o.BundleFile == "") {
		return errors.New("svid-cert-file, svid-key-file and bundle-file go together")
	}
	if !files && o.WorkloadAPISocket == "" {
		return errors.New("mTLS needs workload-api-socket or the svid-cert-file, svid-key-file and bundle-file trio")
	}
	return nil
}

// Dial connects to the SPIRE server. The returned closer releases the
// connection and, for the Workload API, the X509Source.
func Dial(ctx context.Context, o ConnectOptions) (*grpc.ClientConn, io.Closer, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if o.SocketPath != "" {
		conn, err := grpc.NewClient("unix://"+o.SocketPath,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", o.SocketPath)
			}))
		if err != nil {
			return nil, nil, fmt.Errorf("dial SPIRE admin socket %s: %w", o.SocketPath, err)
		}
		return conn, conn, nil
	}
	serverID := spiffeid.RequireFromString(o.ServerID)
	var (
		svids   x509svid.Source
		bundles x509bundle.Source
		closers closeAll
	)
	if o.SVIDCertFile != "" {
		svid, err := x509svid.Load(o.SVIDCertFile, o.SVIDKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("load SVID %s: %w", o.SVIDCertFile, err)
		}
		bundle, err := x509bundle.Load(serverID.TrustDomain(), o.BundleFile)
		if err != nil {
			return nil, nil, fmt.Errorf("load bundle %s: %w", o.BundleFile, err)
		}
		svids, bundles = svid, bundle
	} else {
		src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(o.WorkloadAPISocket)))
		if err != nil {
			return nil, nil, fmt.Errorf("X509-SVID from the Workload API at %s: %w", o.WorkloadAPISocket, err)
		}
		svids, bundles = src, src
		closers = append(closers, src)
	}
	creds := grpccredentials.MTLSClientCredentials(svids, bundles, tlsconfig.AuthorizeID(serverID))
	conn, err := grpc.NewClient(o.Address, grpc.WithTransportCredentials(creds))
	if err != nil {
		_ = closers.Close()
		return nil, nil, fmt.Errorf("dial SPIRE server %s: %w", o.Address, err)
	}
	return conn, append(closeAll{conn}, closers...), nil
}

type closeAll []io.Closer

func (c closeAll) Close() error {
	var errs []error
	for _, x := range c {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}
