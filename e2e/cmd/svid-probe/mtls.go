package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/spiffetls/tlsconfig"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

// mtlsPeer serves and dials mTLS with the SVID from the Workload API,
// trusting only the bundle file.
type mtlsPeer struct {
	addr   string
	bundle x509bundle.Source
	peer   string
}

// newMTLS loads the bundle for the trust domain of peerID (or of the
// probe's own SVID when no peer is named) from a PEM file.
func newMTLS(addr, bundlePath, peerID string) (*mtlsPeer, error) {
	if bundlePath == "" {
		return nil, errors.New("--serve and --dial need --bundle")
	}
	return &mtlsPeer{addr: addr, bundle: &fileBundle{path: bundlePath}, peer: peerID}, nil
}

// fileBundle reads the bundle file at every handshake, so that a bundle
// the operator updates is used at once.
type fileBundle struct{ path string }

func (f *fileBundle) GetX509BundleForTrustDomain(td spiffeid.TrustDomain) (*x509bundle.Bundle, error) {
	return x509bundle.Load(td, f.path)
}

// svid waits for the probe's X509-SVID source.
func (m *mtlsPeer) svid(ctx context.Context) (*workloadapi.X509Source, error) {
	return workloadapi.NewX509Source(ctx, workloadapi.WithClientOptions(workloadapi.WithAddr(m.addr)))
}

func (m *mtlsPeer) serve(listen string, out io.Writer) {
	source, err := m.svid(context.Background())
	if err != nil {
		fmt.Fprintf(out, "mtls-error error=%q\n", err.Error())
		return
	}
	config := tlsconfig.MTLSServerConfig(source, m.bundle, tlsconfig.AuthorizeAny())
	server := &http.Server{
		Addr:              listen,
		TLSConfig:         config,
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := x509svid.IDFromCert(r.TLS.PeerCertificates[0])
			if err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			fmt.Fprintf(out, "mtls-served peer=%s\n", id)
			fmt.Fprintf(w, "hello %s", id)
		}),
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(out, "mtls-error error=%q\n", err.Error())
		return
	}
	fmt.Fprintf(out, "mtls-error error=%q\n", server.ServeTLS(ln, "", "").Error())
}

func (m *mtlsPeer) dialEvery(target string, interval time.Duration, out io.Writer) {
	peer, err := spiffeid.FromString(m.peer)
	if err != nil {
		fmt.Fprintf(out, "mtls-error error=%q\n", "--peer-id: "+err.Error())
		return
	}
	source, err := m.svid(context.Background())
	if err != nil {
		fmt.Fprintf(out, "mtls-error error=%q\n", err.Error())
		return
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: tlsconfig.MTLSClientConfig(source, m.bundle, tlsconfig.AuthorizeID(peer)),
	}}
	last := ""
	for {
		line := call(client, "https://"+target+"/", peer)
		if line != last {
			fmt.Fprint(out, line)
			last = line
		}
		time.Sleep(interval) // the probe's own call period
	}
}

func call(client *http.Client, url string, peer spiffeid.ID) string {
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Sprintf("mtls-error error=%q\n", err.Error())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Sprintf("mtls-error error=%q\n", err.Error())
	}
	return fmt.Sprintf("mtls-ok peer=%s reply=%q\n", peer, body)
}
