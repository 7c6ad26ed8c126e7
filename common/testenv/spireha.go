package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// SpireHA is SPIRE in high availability: several spire-servers of one trust
// domain sharing one PostgreSQL database. Each server has its own CA key
// (its own disk key manager) and publishes its CA into the bundle in the
// shared datastore; entries, agents and join tokens live in the datastore,
// so a write through one server is read through every other.
type SpireHA struct {
	// Postgres is the database server the spire-servers share.
	Postgres *Postgres
	// Servers are the spire-servers, each with its own socket, port and
	// directory.
	Servers []*Spire
}

// StartSpireHA starts PostgreSQL, creates a database and starts servers
// spire-servers on it with opts (PostgresConnection is set here), one after
// the other, so that the datastore's schema is migrated once. It returns
// once every server is healthy and serves a bundle that holds the CA of
// every server.
func StartSpireHA(opts SpireOptions, servers int) (*SpireHA, error) {
	if servers < 1 {
		return nil, fmt.Errorf("SPIRE in HA needs at least one server, not %d", servers)
	}
	pg, err := StartPostgres()
	if err != nil {
		return nil, err
	}
	ha := &SpireHA{Postgres: pg}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if opts.PostgresConnection, err = pg.CreateDatabase(ctx, "spire"); err != nil {
		return nil, errors.Join(err, ha.Cleanup())
	}
	for range servers {
		s, err := StartSpire(opts)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("spire-server %d of %d: %w", len(ha.Servers)+1, servers, err), ha.Cleanup())
		}
		ha.Servers = append(ha.Servers, s)
	}
	if err := ha.waitBundles(ctx); err != nil {
		return nil, errors.Join(err, ha.Cleanup())
	}
	return ha, nil
}

// waitBundles waits until every server serves a bundle with at least one
// X.509 authority per server: every server's CA is in the shared bundle and
// every server has read it.
func (h *SpireHA) waitBundles(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, s := range h.Servers {
			n, err := s.x509Authorities(ctx)
			if err != nil {
				last = err
				return false, nil
			}
			if n < len(h.Servers) {
				last = fmt.Errorf("spire-server %s serves a bundle with %d X.509 authorities, want %d", s.Address, n, len(h.Servers))
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("bundle of SPIRE in HA: %w (last: %v)", err, last)
	}
	return nil
}

// x509Authorities counts the X.509 authorities of the server's bundle.
func (s *Spire) x509Authorities(ctx context.Context) (int, error) {
	conn, err := s.Dial(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	b, err := bundlev1.NewBundleClient(conn).GetBundle(ctx, &bundlev1.GetBundleRequest{})
	if err != nil {
		return 0, fmt.Errorf("GetBundle of %s: %w", s.Address, err)
	}
	return len(b.GetX509Authorities()), nil
}

// Addresses are the servers' TCP addresses, in order.
func (h *SpireHA) Addresses() []string {
	out := make([]string, len(h.Servers))
	for i, s := range h.Servers {
		out[i] = s.Address
	}
	return out
}

// SocketPaths are the servers' admin sockets, in order.
func (h *SpireHA) SocketPaths() []string {
	out := make([]string, len(h.Servers))
	for i, s := range h.Servers {
		out[i] = s.SocketPath
	}
	return out
}

// Logs returns every server's log and PostgreSQL's, each under a heading.
func (h *SpireHA) Logs() string {
	var b strings.Builder
	for i, s := range h.Servers {
		fmt.Fprintf(&b, "--- spire-server %d (%s) ---\n%s\n", i+1, s.Address, s.Logs())
	}
	fmt.Fprintf(&b, "--- postgres ---\n%s", h.Postgres.Logs())
	return b.String()
}

// Cleanup stops every server and PostgreSQL and removes their directories.
func (h *SpireHA) Cleanup() error {
	var errs []error
	for _, s := range h.Servers {
		errs = append(errs, s.Cleanup())
	}
	errs = append(errs, h.Postgres.Cleanup())
	return errors.Join(errs...)
}
