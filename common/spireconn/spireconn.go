// Package spireconn connects an operator to a SPIRE server, in one of the two
// ways every Trustplane operator supports: the server's admin Unix socket
// (an operator running beside the server), or mTLS over TCP with the
// operator's own X509-SVID, from the SPIRE agent's Workload API or from PEM
// files (a minted admin SVID), authorizing the server by its SPIFFE ID.
//
// Servers in high availability (several spire-servers sharing one SQL
// datastore) are reached as a list of sockets or addresses, whose calls are
// balanced over the servers that are up and fail over from a server that
// goes down to the others, or as one DNS name with several addresses, used
// one at a time.
package spireconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffegrpc/grpccredentials"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Keys of the connection settings, as flags; the environment variable of each
// is the key upper-cased with dashes turned into underscores.
const (
	KeySocket            = "spire-socket"
	KeyAddress           = "spire-address"
	KeyServerID          = "spire-server-id"
	KeyWorkloadAPISocket = "workload-api-socket"
	KeySVIDCertFile      = "svid-cert-file"
	KeySVIDKeyFile       = "svid-key-file"
	KeyBundleFile        = "bundle-file"
)

// Options say how to reach the SPIRE server. Set exactly one of SocketPath
// (admin Unix socket) and Address (mTLS over TCP).
type Options struct {
	// SocketPath is the server's admin Unix socket, or the sockets of
	// servers in HA separated by commas.
	SocketPath string
	// Address is the server's host:port for mTLS (of a DNS name with several
	// addresses, one at a time, the next when its connection breaks), or the
	// host:port of servers in HA separated by commas.
	Address string
	// ServerID is the SPIFFE ID the server must present over mTLS,
	// usually spiffe://<trust domain>/spire/server.
	ServerID string
	// WorkloadAPISocket is the Workload API address
	// ("unix:///run/spire/agent.sock"; a bare path is accepted too) the
	// operator's own X509-SVID and bundle come from.
	WorkloadAPISocket string
	// SVIDCertFile is a PEM X509-SVID to use instead of the Workload API.
	SVIDCertFile string
	// SVIDKeyFile is the PEM private key of SVIDCertFile.
	SVIDKeyFile string
	// BundleFile is the PEM X.509 bundle of the server's trust domain.
	BundleFile string
}

// AddFlags registers the connection flags on fs.
func AddFlags(fs *pflag.FlagSet) {
	fs.String(KeySocket, "", "SPIRE server admin Unix socket, or comma-separated sockets of servers in HA to fail over between (set this or --spire-address) (env SPIRE_SOCKET)")
	fs.String(KeyAddress, "", "SPIRE server host:port for mTLS with the operator's own X509-SVID, or comma-separated host:port of servers in HA to balance over and fail over between; of a DNS name with several addresses (headless Service), one server is used at a time, moving to another when its connection breaks (env SPIRE_ADDRESS)")
	fs.String(KeyServerID, "", "SPIFFE ID the SPIRE server must present over mTLS (default spiffe://<trust domain>/spire/server) (env SPIRE_SERVER_ID)")
	fs.String(KeyWorkloadAPISocket, "", "Workload API address the operator's X509-SVID comes from, e.g. unix:///run/spire/agent-sockets/spire-agent.sock (env WORKLOAD_API_SOCKET)")
	fs.String(KeySVIDCertFile, "", "PEM X509-SVID to use instead of the Workload API (env SVID_CERT_FILE)")
	fs.String(KeySVIDKeyFile, "", "PEM key of --svid-cert-file (env SVID_KEY_FILE)")
	fs.String(KeyBundleFile, "", "PEM bundle of the SPIRE server's trust domain, with --svid-cert-file (env BUNDLE_FILE)")
}

// Load reads the connection settings from v. trustDomain, when set, gives the
// default server ID for mTLS. It does not validate: an operator for which
// SPIRE is optional checks Enabled first, the others call Validate.
func Load(v *viper.Viper, trustDomain string) Options {
	o := Options{
		SocketPath: v.GetString(KeySocket), Address: v.GetString(KeyAddress),
		ServerID: v.GetString(KeyServerID), WorkloadAPISocket: v.GetString(KeyWorkloadAPISocket),
		SVIDCertFile: v.GetString(KeySVIDCertFile), SVIDKeyFile: v.GetString(KeySVIDKeyFile),
		BundleFile: v.GetString(KeyBundleFile),
	}
	if o.Address != "" && o.ServerID == "" && trustDomain != "" {
		o.ServerID = "spiffe://" + trustDomain + "/spire/server"
	}
	return o
}

// Enabled reports whether any way to reach SPIRE is configured.
func (o Options) Enabled() bool {
	return o.SocketPath != "" || o.Address != "" || o.WorkloadAPISocket != "" || o.SVIDCertFile != ""
}

// Validate reports an incomplete or ambiguous connection setting, naming the
// flags to fix.
func (o Options) Validate() error {
	switch {
	case o.SocketPath != "" && (o.Address != "" || o.WorkloadAPISocket != "" || o.SVIDCertFile != ""):
		return fmt.Errorf("set either --%s or --%s (mTLS), not both", KeySocket, KeyAddress)
	case o.SocketPath == "" && o.Address == "":
		return fmt.Errorf("set --%s (admin Unix socket) or --%s (mTLS)", KeySocket, KeyAddress)
	case o.SocketPath != "":
		_, err := splitList(KeySocket, o.SocketPath)
		return err
	}
	if _, err := splitList(KeyAddress, o.Address); err != nil {
		return err
	}
	if _, err := spiffeid.FromString(o.ServerID); err != nil {
		return fmt.Errorf("--%s %q: %w", KeyServerID, o.ServerID, err)
	}
	files := o.SVIDCertFile != "" || o.SVIDKeyFile != "" || o.BundleFile != ""
	if files && (o.SVIDCertFile == "" || o.SVIDKeyFile == "" || o.BundleFile == "") {
		return fmt.Errorf("--%s, --%s and --%s go together", KeySVIDCertFile, KeySVIDKeyFile, KeyBundleFile)
	}
	if files && o.WorkloadAPISocket != "" {
		return fmt.Errorf("set either --%s or the SVID files, not both", KeyWorkloadAPISocket)
	}
	if !files && o.WorkloadAPISocket == "" {
		return fmt.Errorf("mTLS needs --%s or the --%s, --%s and --%s trio", KeyWorkloadAPISocket, KeySVIDCertFile, KeySVIDKeyFile, KeyBundleFile)
	}
	return nil
}

// Dial connects to the SPIRE server. The connection is lazy: a server that is
// not up yet is retried by each call. For the Workload API it waits for the
// first SVID, bounded by ctx. The returned closer releases the connection
// and, for the Workload API, the X509Source.
func Dial(ctx context.Context, o Options) (*grpc.ClientConn, io.Closer, error) {
	if err := o.Validate(); err != nil {
		return nil, nil, err
	}
	if o.SocketPath != "" {
		paths, err := splitList(KeySocket, o.SocketPath)
		if err != nil {
			return nil, nil, err
		}
		conn, err := newSocketsClient(paths, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, fmt.Errorf("dial SPIRE admin socket %s: %w", o.SocketPath, err)
		}
		return conn, conn, nil
	}
	serverID, err := spiffeid.FromString(o.ServerID)
	if err != nil {
		return nil, nil, fmt.Errorf("--%s %q: %w", KeyServerID, o.ServerID, err)
	}
	addresses, err := splitList(KeyAddress, o.Address)
	if err != nil {
		return nil, nil, err
	}
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
		addr := o.WorkloadAPISocket
		if !strings.Contains(addr, "://") {
			addr = "unix://" + addr
		}
		src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(addr)))
		if err != nil {
			return nil, nil, fmt.Errorf("X509-SVID from the Workload API at %s: %w", addr, err)
		}
		svids, bundles = src, src
		closers = append(closers, src)
	}
	creds := grpccredentials.MTLSClientCredentials(svids, bundles, tlsconfig.AuthorizeID(serverID))
	conn, err := newAddressesClient(addresses, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("dial SPIRE server %s: %w", o.Address, err), closers.Close())
	}
	return conn, append(closeAll{conn}, closers...), nil
}

// closeAll closes each of its closers and joins their errors.
type closeAll []io.Closer

func (c closeAll) Close() error {
	var errs []error
	for _, x := range c {
		errs = append(errs, x.Close())
	}
	return errors.Join(errs...)
}
