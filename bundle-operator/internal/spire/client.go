package spire

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Bundle is one trust domain's bundle as the Bundle API returns it.
type Bundle struct {
	// TrustDomain is the trust domain name, e.g. "example.org".
	TrustDomain string
	// SequenceNumber increases on every change of the bundle.
	SequenceNumber uint64
	// X509Authorities are DER certificates.
	X509Authorities [][]byte
	// JWTAuthorities are the JWT signing keys.
	JWTAuthorities []JWTKey
}

// JWTKey is a JWT authority: a PKIX public key and its key ID.
type JWTKey struct {
	// KeyID is the "kid".
	KeyID string
	// PublicKey is the PKIX DER public key.
	PublicKey []byte
}

// Reader reads bundles from SPIRE. Client implements it; tests may fake it.
type Reader interface {
	// ServerBundle returns the bundle of the server's own trust domain.
	ServerBundle(ctx context.Context) (*Bundle, error)
	// FederatedBundles returns the federated bundles SPIRE holds, keyed by
	// trust domain name.
	FederatedBundles(ctx context.Context) (map[string]*Bundle, error)
}

// Options select how to connect. Set SocketPath for the admin socket, or
// ServerAddress, WorkloadAPISocket and ServerID for mTLS.
type Options struct {
	// SocketPath is the server's admin API Unix socket.
	SocketPath string
	// ServerAddress is the server's TCP address (host:port) for mTLS.
	ServerAddress string
	// WorkloadAPISocket is the SPIRE agent's Workload API Unix socket that
	// provides the operator's X509-SVID for mTLS.
	WorkloadAPISocket string
	// ServerID is the SPIFFE ID the server must present over mTLS.
	ServerID string
}

// Validate reports whether exactly one way to connect is configured.
func (o Options) Validate() error {
	admin := o.SocketPath != ""
	mtls := o.ServerAddress != "" || o.WorkloadAPISocket != ""
	switch {
	case admin && mtls:
		return errors.New("set either the SPIRE admin socket or the server address and Workload API socket, not both")
	case mtls && (o.ServerAddress == "" || o.WorkloadAPISocket == "" || o.ServerID == ""):
		return errors.New("mTLS to SPIRE needs the server address, the Workload API socket and the server's SPIFFE ID")
	}
	return nil
}

// Enabled reports whether a SPIRE connection is configured at all.
func (o Options) Enabled() bool {
	return o.SocketPath != "" || o.ServerAddress != "" || o.WorkloadAPISocket != ""
}

// Client is a Reader over a gRPC connection to the SPIRE Server.
type Client struct {
	conn   *grpc.ClientConn
	api    bundlev1.BundleClient
	closer func() error
}

var _ Reader = &Client{}

// Dial connects as opts says. The connection is lazy: a server that is not
// up yet is retried by each call. For mTLS it waits for the first SVID from
// the Workload API, bounded by ctx.
func Dial(ctx context.Context, opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.SocketPath != "" {
		conn, err := grpc.NewClient("unix://"+opts.SocketPath, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connect to SPIRE admin socket %s: %w", opts.SocketPath, err)
		}
		return NewClient(conn, conn.Close), nil
	}
	serverID, err := spiffeid.FromString(opts.ServerID)
	if err != nil {
		return nil, fmt.Errorf("SPIRE server ID %q: %w", opts.ServerID, err)
	}
	addr := opts.WorkloadAPISocket
	if !strings.HasPrefix(addr, "unix://") {
		addr = "unix://" + addr
	}
	src, err := workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(addr)))
	if err != nil {
		return nil, fmt.Errorf("X509-SVID from Workload API %s: %w", addr, err)
	}
	tlsConf := tlsconfig.MTLSClientConfig(src, src, tlsconfig.AuthorizeID(serverID))
	conn, err := grpc.NewClient(opts.ServerAddress, grpc.WithTransportCredentials(credentials.NewTLS(tlsConf)))
	if err != nil {
		_ = src.Close()
		return nil, fmt.Errorf("connect to SPIRE server %s: %w", opts.ServerAddress, err)
	}
	return NewClient(conn, func() error { return errors.Join(conn.Close(), src.Close()) }), nil
}

// NewClient wraps an established connection; closer (may be nil) runs on Close.
func NewClient(conn *grpc.ClientConn, closer func() error) *Client {
	return &Client{conn: conn, api: bundlev1.NewBundleClient(conn), closer: closer}
}

// Close releases the connection (and the X509Source for mTLS).
func (c *Client) Close() error {
	if c.closer == nil {
		return nil
	}
	return c.closer()
}

// ServerBundle implements Reader with GetBundle.
func (c *Client) ServerBundle(ctx context.Context) (*Bundle, error) {
	b, err := c.api.GetBundle(ctx, &bundlev1.GetBundleRequest{})
	if err != nil {
		return nil, fmt.Errorf("SPIRE GetBundle: %w", err)
	}
	return fromProto(b), nil
}

// FederatedBundles implements Reader with ListFederatedBundles, following
// pages to the end.
func (c *Client) FederatedBundles(ctx context.Context) (map[string]*Bundle, error) {
	out := map[string]*Bundle{}
	req := &bundlev1.ListFederatedBundlesRequest{}
	for {
		resp, err := c.api.ListFederatedBundles(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("SPIRE ListFederatedBundles: %w", err)
		}
		for _, b := range resp.GetBundles() {
			out[b.GetTrustDomain()] = fromProto(b)
		}
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

func fromProto(b *types.Bundle) *Bundle {
	out := &Bundle{TrustDomain: b.GetTrustDomain(), SequenceNumber: b.GetSequenceNumber()}
	for _, a := range b.GetX509Authorities() {
		out.X509Authorities = append(out.X509Authorities, a.GetAsn1())
	}
	for _, k := range b.GetJwtAuthorities() {
		out.JWTAuthorities = append(out.JWTAuthorities, JWTKey{KeyID: k.GetKeyId(), PublicKey: k.GetPublicKey()})
	}
	return out
}
