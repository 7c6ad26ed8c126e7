package trustbundle

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"
)

// selectedNamespaces returns, sorted, the namespaces sel picks (all when
// sel is nil), skipping namespaces being deleted: nothing can be created in
// them and their objects go with them.
func selectedNamespaces(ctx context.Context, c client.Reader, sel *metav1.LabelSelector) ([]string, error) {
	selector := labels.Everything()
	if sel != nil {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return nil, ctrlerrors.WithReason(ReasonInvalidSelector, ctrlerrors.BlockedErrorf("spec.target.namespaceSelector: %w", err))
		}
		selector = s
	}
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NamespaceList"))
	if err := c.List(ctx, l, client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, ctrlerrors.RetryableErrorf("list namespaces: %w", err)
	}
	out := make([]string, 0, len(l.Items))
	for _, ns := range l.Items {
		if ns.DeletionTimestamp == nil {
			out = append(out, ns.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
