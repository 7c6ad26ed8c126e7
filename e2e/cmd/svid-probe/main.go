// Command svid-probe is the workload of the end-to-end suite: in a pod, it
// asks the SPIFFE Workload API for its X509-SVID and a JWT-SVID and prints
// what it got, one line per change, so that a spec can read from the pod's
// log exactly which identity the pod received, or that it received none:
//
//	x509-svid id=<SPIFFE ID> dns=<names,...> expires=<RFC 3339> authority=<hex key ID of the signing CA>
//	jwt-svid id=<SPIFFE ID> audience=<audience>
//	no-identity error=<why>
//
// With --bundle (a PEM trust bundle, e.g. from a ConfigMap that
// bundle-operator writes), it also serves mTLS (--serve) with its SVID,
// accepting peers the bundle verifies, or calls such a server (--dial),
// accepting only the server --peer-id names, and prints each outcome:
//
//	mtls-served peer=<client SPIFFE ID>
//	mtls-ok peer=<server SPIFFE ID> reply=<what the server answered>
//	mtls-error error=<why>
//
// With --webhook it serves a validating admission webhook over TLS with its
// X509-SVID as the serving certificate, denying every object it reviews
// (see serveWebhook).
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/svid/jwtsvid"
	"github.com/spiffe/go-spiffe/v2/workloadapi"
)

func main() {
	addr := flag.String("socket", envOr("SPIFFE_ENDPOINT_SOCKET", "unix:///run/spire/sockets/agent.sock"), "Workload API address")
	audience := flag.String("audience", "trustplane-e2e", "audience of the JWT-SVID")
	interval := flag.Duration("interval", 2*time.Second, "time between fetches")
	bundle := flag.String("bundle", "", "PEM trust bundle that verifies mTLS peers")
	serve := flag.String("serve", "", "serve mTLS on this address (needs --bundle)")
	dial := flag.String("dial", "", "call this mTLS server (host:port) every interval (needs --bundle and --peer-id)")
	peerID := flag.String("peer-id", "", "the SPIFFE ID the dialled server must have")
	webhook := flag.String("webhook", "", "serve a validating admission webhook that denies every object over TLS with the SVID on this address")
	flag.Parse()
	p := &probe{out: os.Stdout, addr: *addr, audience: *audience}
	if *serve != "" || *dial != "" {
		m, err := newMTLS(*addr, *bundle, *peerID)
		if err != nil {
			fmt.Fprintf(os.Stdout, "mtls-error error=%q\n", err.Error())
			os.Exit(1)
		}
		if *serve != "" {
			go m.serve(*serve, os.Stdout)
		}
		if *dial != "" {
			go m.dialEvery(*dial, *interval, os.Stdout)
		}
	}
	if *webhook != "" {
		go serveWebhook(*addr, *webhook, os.Stdout)
	}
	for {
		p.fetch(context.Background())
		time.Sleep(*interval) // the probe's own fetch period
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// probe prints what each fetch returned, when it differs from the last.
type probe struct {
	out      io.Writer
	addr     string
	audience string
	last     string
}

func (p *probe) fetch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	report := p.report(ctx)
	if report != p.last {
		fmt.Fprint(p.out, report)
		p.last = report
	}
}

func (p *probe) report(ctx context.Context) string {
	x, err := workloadapi.FetchX509SVID(ctx, workloadapi.WithAddr(p.addr))
	if err != nil {
		return fmt.Sprintf("no-identity error=%q\n", err.Error())
	}
	leaf := x.Certificates[0]
	report := fmt.Sprintf("x509-svid id=%s dns=%s expires=%s authority=%s\n", x.ID, strings.Join(leaf.DNSNames, ","),
		leaf.NotAfter.UTC().Format(time.RFC3339), hex.EncodeToString(leaf.AuthorityKeyId))
	j, err := workloadapi.FetchJWTSVID(ctx, jwtsvid.Params{Audience: p.audience}, workloadapi.WithAddr(p.addr))
	if err != nil {
		return report + fmt.Sprintf("no-jwt-svid error=%q\n", err.Error())
	}
	return report + fmt.Sprintf("jwt-svid id=%s audience=%s\n", j.ID, strings.Join(j.Audience, ","))
}
