package testenv

import (
	"context"
	"fmt"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Edit re-reads obj, applies change to it and writes it back with Update,
// starting over when the write conflicts. A controller under test writes the
// status of the objects a test edits, so a plain get-then-update races it;
// Edit does not. On return obj holds what the API server stored.
func Edit[T client.Object](ctx context.Context, c client.Client, obj T, change func(T)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(ctx, obj)
	})
	if err != nil {
		return fmt.Errorf("edit %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return nil
}
