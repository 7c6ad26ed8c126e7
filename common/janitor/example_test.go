package janitor_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/janitor"
)

// In a handler, the janitor from the context writes the children of this
// pass (marking them owned) and, once the whole desired set of a type is
// known, deletes the owned children of that type the pass did not write.
func ExampleClient_Cleanup() {
	createOrUpdate := func(ctx context.Context, w *widgetv1.Widget) error {
		j := janitor.FromContext(ctx)
		for _, name := range w.Spec.Children {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace}}
			if _, err := j.CreateOrUpdate(ctx, cm, func() error { return nil }); err != nil {
				return fmt.Errorf("ensure configmap %s: %w", name, err)
			}
		}
		// Declare only after every child was written: an early return
		// above leaves the type undeclared, so nothing is deleted.
		if err := j.Declare(&corev1.ConfigMapList{}); err != nil {
			return err
		}
		_, err := j.Cleanup(ctx)
		return err
	}
	_ = createOrUpdate
}
