package output

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
)

// Kind is an output kind the operator can write.
type Kind string

// Output kinds, as given to --output.
const (
	// KindSpiffeEntry writes spiffe.trustplane.dev SpiffeEntry objects.
	KindSpiffeEntry Kind = "spiffeentry"
	// KindClusterSPIFFEID writes spire.spiffe.io ClusterSPIFFEID objects.
	KindClusterSPIFFEID Kind = "clusterspiffeid"
)

// Kinds returns every output kind the operator knows, whether configured or
// not: withdrawal and the orphan sweep cover all of those whose CRD is
// served.
func Kinds() []Kind { return []Kind{KindSpiffeEntry, KindClusterSPIFFEID} }

// GVK returns the API kind written for k.
func (k Kind) GVK() schema.GroupVersionKind {
	if k == KindClusterSPIFFEID {
		return ClusterSPIFFEIDGVK()
	}
	return spiffev1alpha1.GroupVersion.WithKind("SpiffeEntry")
}

// New returns an empty object of output kind k: typed for SpiffeEntry,
// unstructured for ClusterSPIFFEID.
func New(k Kind) client.Object {
	if k == KindClusterSPIFFEID {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ClusterSPIFFEIDGVK())
		return u
	}
	return &spiffev1alpha1.SpiffeEntry{}
}

// NewList returns an empty list of output kind k: typed for SpiffeEntry,
// unstructured for ClusterSPIFFEID.
func NewList(k Kind) client.ObjectList {
	if k == KindClusterSPIFFEID {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(ClusterSPIFFEIDGVK().GroupVersion().WithKind(ClusterSPIFFEIDGVK().Kind + "List"))
		return l
	}
	return &spiffev1alpha1.SpiffeEntryList{}
}

// Items returns the objects of a list made by NewList.
func Items(l client.ObjectList) []client.Object {
	switch l := l.(type) {
	case *spiffev1alpha1.SpiffeEntryList:
		out := make([]client.Object, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out
	case *unstructured.UnstructuredList:
		out := make([]client.Object, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out
	}
	return nil
}

// ParseKinds parses a list of output kinds, rejecting unknown and duplicate
// ones and an empty list.
func ParseKinds(values []string) ([]Kind, error) {
	var out []Kind
	for _, v := range values {
		k := Kind(strings.ToLower(strings.TrimSpace(v)))
		if k != KindSpiffeEntry && k != KindClusterSPIFFEID {
			return nil, fmt.Errorf("unknown output %q (want %s or %s)", v, KindSpiffeEntry, KindClusterSPIFFEID)
		}
		if slices.Contains(out, k) {
			return nil, fmt.Errorf("output %q given twice", v)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("at least one output kind is required")
	}
	return out, nil
}

// ClusterSPIFFEIDGVK returns the spire-controller-manager kind written for
// KindClusterSPIFFEID (a function, so no caller can change it for everyone).
func ClusterSPIFFEIDGVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "spire.spiffe.io", Version: "v1alpha1", Kind: "ClusterSPIFFEID"}
}

// MaxSelectors is the most selectors a SpiffeEntry accepts.
const MaxSelectors = 64

// maxNameLen keeps output names usable as label values too.
const maxNameLen = 63

// nameHashHex is the number of hex digits of the hash in output names: 16,
// that is 64 bits, so that no binding can be given a name whose output name
// collides with another binding's by searching for a short hash.
const nameHashHex = 16

// Name returns the output name of binding namespace/name:
// "<namespace>-<name>-<hash>", the prefix cut so the whole fits 63
// characters. The hash of the exact pair keeps "a-b"/"c" and "a"/"b-c"
// apart, and names cut to the same prefix.
func Name(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	suffix := hex.EncodeToString(sum[:])[:nameHashHex]
	prefix := namespace + "-" + name
	if max := maxNameLen - len(suffix) - 1; len(prefix) > max {
		prefix = strings.TrimRight(prefix[:max], "-.")
	}
	return prefix + "-" + suffix
}

// Desired is everything an output is built from.
type Desired struct {
	// Namespace of the binding.
	Namespace string
	// ServiceAccount of the binding.
	ServiceAccount string
	// Variant of the binding.
	Variant string
	// SPIFFEID is the rendered SPIFFE ID.
	SPIFFEID string
	// ParentID is the node alias of the cluster's agents.
	ParentID string
	// Selectors is the rendered selector set.
	Selectors []string
	// PoolLabels is the pool's selector.
	PoolLabels map[string]string
	// X509SVIDTTL and JWTSVIDTTL are the binding's TTLs.
	X509SVIDTTL, JWTSVIDTTL *metav1.Duration
	// Hint is the binding's hint.
	Hint string
	// ClassName is the ClusterSPIFFEID className; empty leaves it unset.
	ClassName string
}

// Labels are the lookup labels every output carries besides the owner and
// environment labels.
func (d Desired) Labels() map[string]string {
	return map[string]string{
		index.LabelGroup:    index.GroupKey(d.Namespace, d.ServiceAccount, d.Variant),
		index.LabelSPIFFEID: index.IDKey(d.SPIFFEID),
	}
}

// SpiffeEntrySpec returns the spec of the SpiffeEntry output.
func (d Desired) SpiffeEntrySpec() spiffev1alpha1.SpiffeEntrySpec {
	return spiffev1alpha1.SpiffeEntrySpec{
		SpiffeID:  d.SPIFFEID,
		ParentID:  d.ParentID,
		Selectors: slices.Clone(d.Selectors),
		EntryOptions: spiffev1alpha1.EntryOptions{
			X509SVIDTTL: d.X509SVIDTTL,
			JWTSVIDTTL:  d.JWTSVIDTTL,
			Hint:        d.Hint,
		},
	}
}

// ClusterSPIFFEIDSpec returns the spec of the ClusterSPIFFEID output as
// unstructured content: the SPIFFE ID as a literal template, the pool
// selector plus the boundary label as podSelector, the binding's namespace
// as namespaceSelector and the full selector set as
// workloadSelectorTemplates, so the entry it makes is as narrow as the
// SpiffeEntry. The fields a binding cannot set (admin, downstream,
// federatesWith, dnsNameTemplates, autoPopulateDNSNames, fallback) are set
// to their narrowest value explicitly, so a change made by someone else is
// drift that the next pass repairs.
func (d Desired) ClusterSPIFFEIDSpec() map[string]any {
	podLabels := make(map[string]any, len(d.PoolLabels)+1)
	for k, v := range d.PoolLabels {
		podLabels[k] = v
	}
	podLabels[v1alpha1.BoundaryLabel] = d.Variant
	templates := make([]any, len(d.Selectors))
	for i, s := range d.Selectors {
		templates[i] = s
	}
	spec := map[string]any{
		"spiffeIDTemplate":          d.SPIFFEID,
		"podSelector":               map[string]any{"matchLabels": podLabels},
		"namespaceSelector":         map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": d.Namespace}},
		"workloadSelectorTemplates": templates,
		"admin":                     false,
		"downstream":                false,
		"fallback":                  false,
		"autoPopulateDNSNames":      false,
		"federatesWith":             []any{},
		"dnsNameTemplates":          []any{},
	}
	if d.Hint != "" {
		spec["hint"] = d.Hint
	}
	if d.X509SVIDTTL != nil {
		spec["ttl"] = d.X509SVIDTTL.Duration.String()
	}
	if d.JWTSVIDTTL != nil {
		spec["jwtTtl"] = d.JWTSVIDTTL.Duration.String()
	}
	if d.ClassName != "" {
		spec["className"] = d.ClassName
	}
	return spec
}
