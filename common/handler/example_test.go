package handler_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/janitor"
)

// Greeter keeps one ConfigMap per Widget child. It returns errors by kind and
// sets only its own status; the Controller does the rest.
type Greeter struct{}

var _ handler.Handler[*widgetv1.Widget] = Greeter{}

// CreateOrUpdate writes the children and reports a missing spec as Blocked.
func (Greeter) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error {
	if len(w.Spec.Children) == 0 {
		return ctrlerrors.WithReason("NoChildren", ctrlerrors.BlockedErrorf("list at least one name in spec.children"))
	}
	j := janitor.FromContext(ctx)
	for _, name := range w.Spec.Children {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace}}
		if _, err := j.CreateOrUpdate(ctx, cm, func() error {
			cm.Data = map[string]string{"greeting": "hello " + name}
			return nil
		}); err != nil {
			return fmt.Errorf("ensure configmap %s: %w", name, err)
		}
	}
	w.Status.ChildCount = len(w.Spec.Children)
	condition.SetStatus(w, "ChildrenWritten", true, "Written", fmt.Sprintf("%d children", w.Status.ChildCount))
	return nil
}

// Delete deletes every owned ConfigMap: declared, and none written.
func (Greeter) Delete(ctx context.Context, _ *widgetv1.Widget) error {
	j := janitor.FromContext(ctx)
	if err := j.Declare(&corev1.ConfigMapList{}); err != nil {
		return err
	}
	_, err := j.Cleanup(ctx)
	return err
}

// A handler holds the business logic of one kind; this one needs no cluster
// to show how it reports a spec it cannot act on.
func Example() {
	err := Greeter{}.CreateOrUpdate(context.Background(), &widgetv1.Widget{})
	fmt.Println(ctrlerrors.IsBlocked(err), ctrlerrors.Reason(err, ""))
	// Output: true NoChildren
}
