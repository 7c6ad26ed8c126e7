package scoped_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// An empty label is no label: with a default environment configured, both
// belong to it; without one, neither names an environment.
func ExampleEnvironmentOf() {
	for _, l := range []map[string]string{
		{labels.Environment: "prod"},
		{labels.Environment: ""},
		nil,
	} {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: l}}
		withDefault, _ := scoped.EnvironmentOf(obj, "dev")
		_, strict := scoped.EnvironmentOf(obj, "")
		fmt.Printf("%q %v\n", withDefault, strict)
	}
	// Output:
	// "prod" true
	// "dev" false
	// "dev" false
}

// A Client of one environment labels what it writes and sees nothing of
// other environments: reading a foreign object returns NotFound.
func ExampleNew() {
	run := func(ctx context.Context, c client.Client) error {
		dev := scoped.New(c, "dev")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "app"}}
		if _, err := dev.CreateOrUpdate(ctx, cm, func() error {
			cm.Data = map[string]string{"level": "debug"}
			return nil
		}); err != nil {
			return err // AlreadyExists if "settings" belongs to another environment
		}
		list := &corev1.ConfigMapList{}
		return dev.List(ctx, list, client.InNamespace("app")) // only environment "dev"
	}
	_ = run
}
