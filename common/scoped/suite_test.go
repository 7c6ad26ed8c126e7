package scoped_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/labels"
)

// cp is the suite's control plane.
var cp = testapi.NewSuite("s-")

func TestScoped(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "scoped")
}

// unlabelled marks a ConfigMap that carries no environment label at all.
const unlabelled = "<none>"

// configMaps creates one ConfigMap per entry of envs (name to label value;
// unlabelled for none) with the unscoped client.
func configMaps(ctx context.Context, ns string, envs map[string]string) {
	for name, env := range envs {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if env != unlabelled {
			cm.Labels = map[string]string{labels.Environment: env}
		}
		Expect(cp.Client.Create(ctx, cm)).To(Succeed())
	}
}

func names(list *corev1.ConfigMapList) []string {
	out := make([]string, 0, len(list.Items))
	for _, cm := range list.Items {
		out = append(out, cm.Name)
	}
	return out
}

func exists(ctx context.Context, ns, name string) bool {
	err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}
