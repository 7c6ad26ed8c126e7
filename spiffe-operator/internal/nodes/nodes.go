package nodes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Transform is a cache transform (cache.TransformFunc) that keeps of a Node
// only its name, UID, resourceVersion and deletion timestamp.
func Transform(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, DeletionTimestamp: n.DeletionTimestamp,
		},
	}, nil
}

// Node is what a per-node parent ID is rendered from.
type Node struct {
	// Name of the Node object.
	Name string
	// UID of the Node object; a node deleted and created again under the
	// same name has a new one, as has its k8s_psat agent ID.
	UID string
}

// Getter returns the node named name; found is false when no Node object
// of that name exists.
type Getter func(ctx context.Context, name string) (n Node, found bool, err error)

// CacheGetter returns a Getter reading r (the manager's cache).
func CacheGetter(r client.Reader) Getter {
	return func(ctx context.Context, name string) (Node, bool, error) {
		var n corev1.Node
		if err := r.Get(ctx, client.ObjectKey{Name: name}, &n); err != nil {
			if apierrors.IsNotFound(err) {
				return Node{}, false, nil
			}
			return Node{}, false, fmt.Errorf("get node %s: %w", name, err)
		}
		return Node{Name: n.Name, UID: string(n.UID)}, true, nil
	}
}

// Lister returns every Node object.
type Lister func(ctx context.Context) ([]Node, error)

// CacheLister returns a Lister reading r (the manager's cache).
func CacheLister(r client.Reader) Lister {
	return func(ctx context.Context) ([]Node, error) {
		var l corev1.NodeList
		if err := r.List(ctx, &l); err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out := make([]Node, len(l.Items))
		for i := range l.Items {
			out[i] = Node{Name: l.Items[i].Name, UID: string(l.Items[i].UID)}
		}
		return out, nil
	}
}
