package framework

import (
	"context"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// FromYAML decodes one object, formatting the YAML with args first.
func FromYAML(format string, args ...any) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(fmt.Appendf(nil, format, args...), &u.Object); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return u, nil
}

// EntriesFor lists the SPIRE entries with the given SPIFFE ID, through the
// Entry API.
func EntriesFor(ctx context.Context, c Cluster, id string) ([]*types.Entry, error) {
	parsed, err := spiffeid.FromString(id)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", id, err)
	}
	conn, err := c.SpireConn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := entryv1.NewEntryClient(conn).ListEntries(ctx, &entryv1.ListEntriesRequest{
		Filter: &entryv1.ListEntriesRequest_Filter{
			BySpiffeId: &types.SPIFFEID{TrustDomain: parsed.TrustDomain().Name(), Path: parsed.Path()},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("list entries of %s: %w", id, err)
	}
	return resp.Entries, nil
}
