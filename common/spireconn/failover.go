package spireconn

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// serviceConfig balances calls over every server that is connected
// (round_robin: a server that goes down leaves the rotation when its
// connection breaks, and comes back once reconnected) and retries the read
// calls the operators make when the server they went to failed under them
// (UNAVAILABLE); writes are not retried here: the operators' passes redo
// them after reading SPIRE again.
const serviceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
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
  }]
}`

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
// balancing and failing over between them.
func newSocketsClient(paths []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, path string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}))
	return newListClient(paths, opts...)
}

// newAddressesClient connects to the servers at addresses. One address is
// a gRPC target: host:port (or dns:///host:port) is resolved by DNS, again
// when a connection breaks, and a name with several addresses (a headless
// Service) is balanced over all of them. Several are used as listed.
func newAddressesClient(addresses []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(addresses) == 1 {
		return grpc.NewClient(addresses[0], append(opts, grpc.WithDefaultServiceConfig(serviceConfig))...)
	}
	return newListClient(addresses, opts...)
}

// newListClient connects to a fixed list of servers.
func newListClient(addrs []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme(serversScheme)
	state := resolver.State{}
	for _, a := range addrs {
		state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a}}})
	}
	r.InitialState(state)
	opts = append(opts, grpc.WithResolvers(r), grpc.WithDefaultServiceConfig(serviceConfig))
	return grpc.NewClient(serversScheme+":///spire-server", opts...)
}
