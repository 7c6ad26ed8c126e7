package entries_test

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// incompressible returns n random characters of [a-z0-9]: PostgreSQL
// compresses a long index key first, so only a value that does not
// compress reaches its index at its full size.
func incompressible(t *testing.T, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// pathOfID returns a SPIFFE ID path that makes spiffe://example.org<path>
// exactly n bytes long, in segments of at most 60 characters.
func pathOfID(t *testing.T, n int) string {
	want := n - len("spiffe://example.org")
	var b strings.Builder
	for b.Len() < want {
		seg := min(60, want-b.Len()-1)
		if seg < 1 {
			seg = 1
		}
		b.WriteString("/" + incompressible(t, seg))
	}
	return b.String()[:want]
}

// TestSPIREHoldsAnEntryAtTheLimitsWhole backs the limits of limits.go with
// a real spire-server on SQLite and on PostgreSQL: an entry whose SPIFFE
// ID and parent ID are MaxIDLength bytes, whose selector is
// MaxSelectorLength bytes and whose DNS name has a label of
// MaxDNSLabelLength characters is created and read back whole, while on
// PostgreSQL an ID just past what its index holds is refused with
// Internal (what the limits keep the operator from ever sending).
func TestSPIREHoldsAnEntryAtTheLimitsWhole(t *testing.T) {
	for _, datastore := range []string{"sqlite", "postgres"} {
		t.Run(datastore, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			opts := testenv.SpireOptions{LogLevel: "INFO"}
			if datastore == "postgres" {
				pg, err := testenv.StartPostgres()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = pg.Cleanup() })
				if opts.PostgresConnection, err = pg.CreateDatabase(ctx, "spire"); err != nil {
					t.Fatal(err)
				}
			}
			spire, err := testenv.StartSpire(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = spire.Cleanup() })
			conn, err := spire.Dial(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			api := entryv1.NewEntryClient(conn)

			selector := &types.Selector{Type: "k8s", Value: incompressible(t, entries.MaxSelectorLength-len("k8s:"))}
			atLimits := &types.Entry{
				SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: pathOfID(t, entries.MaxIDLength)},
				ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: pathOfID(t, entries.MaxIDLength)},
				Selectors: []*types.Selector{selector},
				DnsNames:  []string{"a" + incompressible(t, entries.MaxDNSLabelLength-1) + ".example.org"},
			}
			over := &types.Entry{
				SpiffeId:  &types.SPIFFEID{TrustDomain: "example.org", Path: pathOfID(t, 2700)},
				ParentId:  &types.SPIFFEID{TrustDomain: "example.org", Path: "/node"},
				Selectors: []*types.Selector{{Type: "k8s", Value: "ns:a"}},
			}
			resp, err := api.BatchCreateEntry(ctx, &entryv1.BatchCreateEntryRequest{Entries: []*types.Entry{atLimits, over}})
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.Results[0].Status; codes.Code(st.Code) != codes.OK {
				t.Fatalf("the entry at the limits was refused: %s %s", codes.Code(st.Code), st.Message)
			}
			got, err := api.GetEntry(ctx, &entryv1.GetEntryRequest{Id: resp.Results[0].Entry.Id})
			if err != nil {
				t.Fatal(err)
			}
			if got.SpiffeId.Path != atLimits.SpiffeId.Path || got.ParentId.Path != atLimits.ParentId.Path ||
				len(got.Selectors) != 1 || got.Selectors[0].Value != selector.Value ||
				len(got.DnsNames) != 1 || got.DnsNames[0] != atLimits.DnsNames[0] {
				t.Errorf("read back differs: ID %d bytes (want %d), parent %d (want %d), selectors %d, DNS names %v",
					len(got.SpiffeId.Path), len(atLimits.SpiffeId.Path), len(got.ParentId.Path), len(atLimits.ParentId.Path),
					len(got.Selectors), got.DnsNames)
			}
			if datastore == "postgres" {
				if st := resp.Results[1].Status; codes.Code(st.Code) != codes.Internal {
					t.Errorf("an ID of 2700 bytes on PostgreSQL: %s %q, want Internal (its index holds about 2690)", codes.Code(st.Code), st.Message)
				}
			}
		})
	}
}
