package controller_test

import (
	"context"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	bundlecontroller "github.com/trustplane/trustplane/bundle-operator/internal/controller"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
)

// countingReader counts the reads that reach the API server.
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (c *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.Reader.Get(ctx, key, obj, opts...)
}

var _ = Describe("ConfigMap sources are polled from the metadata cache", func() {
	It("notices an edit of a source without a request per poll, and caches no other namespace's ConfigMaps", func(ctx context.Context) {
		c, err := cache.New(cp.Config, mustCacheOptions())
		Expect(err).NotTo(HaveOccurred())
		cacheCtx, stop := context.WithCancel(ctx)
		DeferCleanup(stop)
		// The operator's metadata watch of ConfigMaps starts this informer.
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		_, err = c.GetInformer(ctx, meta)
		Expect(err).NotTo(HaveOccurred())
		go func() { _ = c.Start(cacheCtx) }()

		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: unique("polled"), Namespace: sourceNamespace}, Data: map[string]string{"pem": "x"}}
		Expect(cp.Client.Create(ctx, src)).To(Succeed())
		elsewhere := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", Namespace: newNamespace(ctx, nil)}}
		Expect(cp.Client.Create(ctx, elsewhere)).To(Succeed())

		live := &countingReader{Reader: cp.Client}
		r := &source.Resolver{Reader: live, Metadata: c, Namespaces: []string{sourceNamespace}}
		sources := []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: src.Name, Key: "pem"}}}
		var first string
		Eventually(func() string {
			first, err = r.Revision(ctx, sources)
			Expect(err).NotTo(HaveOccurred())
			return first
		}).Should(ContainSubstring(src.ResourceVersion))

		src.Data["pem"] = "y"
		Expect(cp.Client.Update(ctx, src)).To(Succeed())
		Eventually(func() (string, error) { return r.Revision(ctx, sources) }).Should(ContainSubstring(src.ResourceVersion))
		Expect(live.gets.Load()).To(BeZero(), "live reads of the source's metadata")

		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		err = c.Get(ctx, client.ObjectKeyFromObject(elsewhere), m)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a ConfigMap outside the source namespaces without our label is cached: %v", err)
	})
})

func mustCacheOptions() cache.Options {
	opts, err := bundlecontroller.CacheOptions([]string{sourceNamespace}, true)
	Expect(err).NotTo(HaveOccurred())
	opts.Scheme = scheme
	return opts
}
