package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/idtemplate"
)

// Field indexes on IdentityBinding.
const (
	// FieldGroup indexes a binding by GroupKey(namespace, serviceAccount,
	// variant): the namespace+service-account group, split by variant,
	// since bindings of different variants never conflict by rule 3 (only
	// by SPIFFE ID, which has its own index).
	FieldGroup = "identity.trustplane.dev/group"
	// FieldSPIFFEID indexes a binding by IDKey(rendered SPIFFE ID).
	FieldSPIFFEID = "identity.trustplane.dev/spiffe-id"
	// FieldPool indexes a binding by PoolKey(poolRef) within its namespace.
	FieldPool = "identity.trustplane.dev/pool"
)

// Labels on outputs, so that output events reach the bindings that wait on
// them and a binding can find the outputs of its peers.
const (
	// LabelGroup carries GroupKey of the owning binding.
	LabelGroup = "identity.trustplane.dev/group"
	// LabelSPIFFEID carries IDKey of the output's SPIFFE ID.
	LabelSPIFFEID = "identity.trustplane.dev/spiffe-id"
)

// hashKey returns 32 hex characters of SHA-256: short enough for a label
// value, and the conflict rules compare the real values anyway, so a
// collision costs only an extra reconcile.
func hashKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// GroupKey is the key of the bindings of one namespace, service account and
// variant: the only bindings that can conflict without sharing a SPIFFE ID.
func GroupKey(namespace, serviceAccount, variant string) string {
	return hashKey("group", namespace, serviceAccount, variant)
}

// IDKey is the key of a SPIFFE ID.
func IDKey(spiffeID string) string { return hashKey("id", spiffeID) }

// PoolKey is the key of a pool reference, with defaults applied.
func PoolKey(ref v1alpha1.PoolReference) string {
	r := ref.Resolved()
	return r.Group + "/" + r.Kind + "/" + r.Name
}

// SPIFFEID renders a binding's SPIFFE ID; ok is false when its template
// does not render.
func SPIFFEID(td spiffeid.TrustDomain, b *v1alpha1.IdentityBinding) (string, bool) {
	id, err := idtemplate.Render(td, b.Spec.SPIFFEIDPathTemplate, idtemplate.Vars{
		Namespace:      b.Namespace,
		ServiceAccount: b.Spec.ServiceAccountName,
		Pool:           b.Spec.PoolRef.Name,
		Variant:        b.Spec.IdentityBoundary.Variant,
	})
	return id, err == nil
}

// Indexer is the part of a manager's field indexer used here.
type Indexer interface {
	IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error
}

// Funcs returns the extract functions of the three IdentityBinding indexes.
func Funcs(td spiffeid.TrustDomain) map[string]client.IndexerFunc {
	return map[string]client.IndexerFunc{
		FieldGroup: func(o client.Object) []string {
			b := o.(*v1alpha1.IdentityBinding)
			return []string{GroupKey(b.Namespace, b.Spec.ServiceAccountName, b.Spec.IdentityBoundary.Variant)}
		},
		FieldSPIFFEID: func(o client.Object) []string {
			if id, ok := SPIFFEID(td, o.(*v1alpha1.IdentityBinding)); ok {
				return []string{IDKey(id)}
			}
			return nil
		},
		FieldPool: func(o client.Object) []string {
			return []string{PoolKey(o.(*v1alpha1.IdentityBinding).Spec.PoolRef)}
		},
	}
}

// Register adds the three IdentityBinding indexes.
func Register(ctx context.Context, idx Indexer, td spiffeid.TrustDomain) error {
	fields := Funcs(td)
	for _, f := range []string{FieldGroup, FieldSPIFFEID, FieldPool} {
		if err := idx.IndexField(ctx, &v1alpha1.IdentityBinding{}, f, fields[f]); err != nil {
			return fmt.Errorf("index IdentityBinding by %s: %w", f, err)
		}
	}
	return nil
}
