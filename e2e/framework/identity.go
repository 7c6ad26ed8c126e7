package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// IdentityNamespace is a namespace whose pods get their identities from a
// SpiffeRegistration of its own and, optionally, the SPIRE bundle from a
// TrustBundle of its own. Both are named after the namespace and select it
// (and nothing else) by the namespace label Label=Name.
type IdentityNamespace struct {
	// Name of the namespace, its SpiffeRegistration and its TrustBundle.
	Name string
	// Label is the key of the namespace's label that both objects select.
	Label string
	// Environment is the trustplane.dev/environment label of both objects.
	Environment string
	// ParentID of the registration's entries; empty leaves it out, so each
	// entry hangs under the agent of the node running its pods.
	ParentID string
	// IDTemplate is the registration's spiffeIDTemplate; empty keeps the
	// operator's default.
	IDTemplate string
	// DNSNameTemplates are the registration's dnsNameTemplates.
	DNSNameTemplates []string
	// Bundle, if set, also creates the TrustBundle of the SPIRE bundle.
	Bundle *BundleTarget
}

// BundleTarget is where an IdentityNamespace's TrustBundle puts the bundle.
type BundleTarget struct {
	// ConfigMap is the name of the ConfigMap in the namespace that receives
	// the PEM bundle under key ca.crt; empty writes none (the TrustBundle
	// then only serves injection into annotated objects).
	ConfigMap string
}

// CreateIdentityNamespace creates the namespace, its SpiffeRegistration and,
// if n.Bundle is set, its TrustBundle, and returns the registration and
// the TrustBundle (nil without one) as created.
func CreateIdentityNamespace(ctx context.Context, c Cluster, n IdentityNamespace) (registration, bundle *unstructured.Unstructured, err error) {
	if n.Name == "" || n.Label == "" {
		return nil, nil, fmt.Errorf("identity namespace: name %q and label %q must both be set", n.Name, n.Label)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{n.Label: n.Name}}}
	if err := c.Client().Create(ctx, ns); err != nil {
		return nil, nil, fmt.Errorf("namespace %s: %w", n.Name, err)
	}
	selector := map[string]any{"matchLabels": map[string]any{n.Label: n.Name}}
	spec := map[string]any{"trustDomain": c.TrustDomain(), "namespaceSelector": selector}
	if n.ParentID != "" {
		spec["parentID"] = n.ParentID
	}
	if n.IDTemplate != "" {
		spec["spiffeIDTemplate"] = n.IDTemplate
	}
	if len(n.DNSNameTemplates) > 0 {
		templates := make([]any, len(n.DNSNameTemplates))
		for i, t := range n.DNSNameTemplates {
			templates[i] = t
		}
		spec["dnsNameTemplates"] = templates
	}
	if registration, err = createClusterObject(ctx, c, "spiffe.trustplane.dev/v1alpha1", "SpiffeRegistration", n, spec); err != nil {
		return nil, nil, err
	}
	if n.Bundle == nil {
		return registration, nil, nil
	}
	spec = map[string]any{"sources": []any{map[string]any{"spire": map[string]any{}}}}
	if n.Bundle.ConfigMap != "" {
		spec["target"] = map[string]any{
			"configMap":         map[string]any{"name": n.Bundle.ConfigMap, "keys": map[string]any{"pem": "ca.crt"}},
			"namespaceSelector": selector,
		}
	}
	if bundle, err = createClusterObject(ctx, c, "bundle.trustplane.dev/v1alpha1", "TrustBundle", n, spec); err != nil {
		return nil, nil, err
	}
	return registration, bundle, nil
}

// createClusterObject creates the cluster-scoped object of kind named after
// n, with n's environment label and spec.
func createClusterObject(ctx context.Context, c Cluster, apiVersion, kind string, n IdentityNamespace, spec map[string]any) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(n.Name)
	if n.Environment != "" {
		u.SetLabels(map[string]string{"trustplane.dev/environment": n.Environment})
	}
	if err := c.Client().Create(ctx, u); err != nil {
		return nil, fmt.Errorf("%s %s: %w", kind, n.Name, err)
	}
	return u, nil
}
