package spireconn_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/net/dns/dnsmessage"
)

// startDNS serves, over UDP on loopback, the A records of one name (with
// or without the final dot) and an empty answer for anything else of that
// name; every other name does not exist. It returns the server's address
// and stops when the spec ends. The test machine has no DNS server of its
// own that could give a name several addresses.
func startDNS(name string, addrs ...netip.Addr) string {
	GinkgoHelper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(pc.Close)
	fqdn := strings.TrimSuffix(name, ".") + "."
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			if reply, err := answer(buf[:n], fqdn, addrs); err == nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// answer builds the reply to one query.
func answer(query []byte, fqdn string, addrs []netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	ours := strings.EqualFold(q.Name.String(), fqdn)
	if !ours {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	if ours && q.Type == dnsmessage.TypeA {
		for _, a := range addrs {
			rr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60}
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil, err
			}
		}
	}
	return b.Finish()
}
