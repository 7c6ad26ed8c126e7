// Package widget is the complete example operator of docs/framework.md: a
// Handler that keeps one ConfigMap per name in a Widget's spec.children and
// deletes the ones that leave the list. Everything else (finalizer,
// environment, conditions, status writes, requeue, events, metrics) is the
// common Controller's job.
package widget

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/janitor"
)

// Handler reconciles Widgets into ConfigMaps.
type Handler struct{}

var (
	_ handler.Handler[*widgetv1.Widget] = &Handler{}
	_ handler.Owner                     = &Handler{}
)

// CreateOrUpdate ensures one ConfigMap per child name, then deletes owned
// ConfigMaps that are no longer listed.
func (h *Handler) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error {
	j := janitor.FromContext(ctx)
	if len(w.Spec.Children) == 0 {
		return ctrlerrors.BlockedErrorf("spec.children is empty: list at least one ConfigMap name")
	}
	for _, name := range w.Spec.Children {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace}}
		if _, err := j.CreateOrUpdate(ctx, cm, func() error {
			cm.Data = maps.Clone(w.Spec.Data)
			return nil
		}); err != nil {
			return fmt.Errorf("ensure configmap %s/%s: %w", w.Namespace, name, err)
		}
	}
	// The full desired set of ConfigMaps is known: once this pass succeeds,
	// the Controller deletes the owned ConfigMaps it did not write.
	if err := j.Declare(&corev1.ConfigMapList{}); err != nil {
		return err
	}
	w.Status.ChildCount = len(w.Spec.Children)
	return nil
}

// OwnedTypes implements handler.Owner: a Widget's children are ConfigMaps.
func (h *Handler) OwnedTypes() []janitor.ChildType {
	return []janitor.ChildType{{List: &corev1.ConfigMapList{}}}
}

// Delete has nothing to do outside the cluster: the Controller deletes the
// owned children of OwnedTypes before it removes the finalizer.
func (h *Handler) Delete(context.Context, *widgetv1.Widget) error { return nil }
