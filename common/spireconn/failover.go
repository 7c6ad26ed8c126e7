package spireconn

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// retryReads retries the read calls the operators make when the server
// they went to failed under them (UNAVAILABLE), on whichever server the
// connection picks next; writes are not retried here: the operators'
// passes redo them after reading SPIRE again.
const retryReads = `"methodConfig": [{
    "name": [
      {"service": "spire.api.server.entry.v1.Entry", "method": "ListEntries"},
      {"service": "spire.api.server.entry.v1.Entry", "method": "GetEntry"},
      {"service": "spire.api.server.entry.v1.Entry", "method": "CountEntries"},
      {"service": "spire.api.server.bundle.v1.Bundle", "method": "GetBundle"},
      {"service": "spire.api.server.bundle.v1.Bundle", "method": "ListFederatedBundles"},
      {"service": "spire.api.server.bundle.v1.Bundle", "method": "GetFederatedBundle"}
    ],
    "retryPolicy": {
      "maxAttempts": 3,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]`

// oneTarget is the service config of one socket or address: gRPC's default
// pick_first, which connects to one server (of a DNS name's addresses, the
// first that answers) and, once that connection breaks, reconnects on the
// next call, to whichever answers then.
const oneTarget = "{" + retryReads + "}"

// serverList is the service config of listed servers: round_robin keeps a
// connection to each and balances calls over those connected; a server
// that goes down leaves the rotation when its connection breaks and comes
// back once reconnected.
const serverList = `{"loadBalancingConfig": [{"round_robin": {}}], ` + retryReads + "}"

// listReconnect bounds the wait between reconnection attempts to a listed
// server: round_robin reconnects on its own while a server is down, so
// without a bound a server back after a long outage would be left out for
// up to gRPC's default two minutes.
func listReconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
		MinConnectTimeout: 20 * time.Second,
	})
}

// serversScheme names the resolver of a listed set of servers; the resolver
// belongs to one connection (grpc.WithResolvers), so the name is not global.
const serversScheme = "spire-servers"

// splitList splits a comma-separated list of servers of flag, trimming
// spaces. It refuses empty items and duplicates.
func splitList(flag, list string) ([]string, error) {
	var out []string
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("--%s %q: an empty item in the list", flag, list)
		}
		if slices.Contains(out, item) {
			return nil, fmt.Errorf("--%s %q: %s is listed twice", flag, list, item)
		}
		out = append(out, item)
	}
	return out, nil
}

// newSocketsClient connects to the admin sockets of one or more servers,
// balancing and failing over between several.
func newSocketsClient(paths []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, path string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}))
	return newListClient(paths, opts...)
}

// newAddressesClient connects to the servers at addresses. One address is
// a gRPC target: host:port (or dns:///host:port) is resolved by DNS, and of
// a name with several addresses (a headless Service) the connection uses
// one server at a time, moving to another when its connection breaks.
// Several addresses are balanced over and failed over between as listed.
func newAddressesClient(addresses []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(addresses) == 1 {
		return grpc.NewClient(addresses[0], append(opts, grpc.WithDefaultServiceConfig(oneTarget))...)
	}
	return newListClient(addresses, opts...)
}

// newListClient connects to a fixed list of servers: one as oneTarget
// says, several as serverList says.
func newListClient(addrs []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme(serversScheme)
	state := resolver.State{}
	for _, a := range addrs {
		state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(state)
	opts = append(opts, grpc.WithResolvers(r))
	if len(addrs) == 1 {
		opts = append(opts, grpc.WithDefaultServiceConfig(oneTarget))
	} else {
		opts = append(opts, grpc.WithDefaultServiceConfig(serverList), listReconnect())
	}
	return grpc.NewClient(serversScheme+":///spire-server", opts...)
}
