package spire

import (
	"context"
	"fmt"

	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"

	"github.com/trustplane/trustplane/common/spireconn"
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
	// ExpiresAt is when the key expires, in seconds since the Unix epoch;
	// zero for never.
	ExpiresAt int64
}

// Reader reads bundles from SPIRE. Client implements it; tests may fake it.
type Reader interface {
	// ServerBundle returns the bundle of the server's own trust domain.
	ServerBundle(ctx context.Context) (*Bundle, error)
	// FederatedBundles returns the federated bundles SPIRE holds, keyed by
	// trust domain name.
	FederatedBundles(ctx context.Context) (map[string]*Bundle, error)
}

// Client is a Reader over a gRPC connection to the SPIRE Server.
type Client struct {
	conn   *grpc.ClientConn
	api    bundlev1.BundleClient
	closer func() error
}

var _ Reader = &Client{}

// Dial connects as opts says (see common/spireconn): over the admin socket,
// or over mTLS with the operator's X509-SVID. The connection is lazy: a
// server that is not up yet is retried by each call.
func Dial(ctx context.Context, opts spireconn.Options) (*Client, error) {
	conn, closer, err := spireconn.Dial(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to SPIRE: %w", err)
	}
	return NewClient(conn, closer.Close), nil
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
		out.JWTAuthorities = append(out.JWTAuthorities, JWTKey{KeyID: k.GetKeyId(), PublicKey: k.GetPublicKey(), ExpiresAt: k.GetExpiresAt()})
	}
	return out
}
