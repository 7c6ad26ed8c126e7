package testenv_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("RestartAPIServer", func() {
	It("keeps etcd's data and every client's access, twice in a row", func(ctx context.Context) {
		cp, err := testenv.StartControlPlane(testenv.ControlPlaneOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(cp.Logs())
			}
			Expect(cp.Stop()).To(Succeed())
		})
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
		Expect(cp.Client.Create(ctx, cm)).To(Succeed())
		for range 2 {
			Expect(cp.RestartAPIServer(ctx)).To(Succeed())
			got := &corev1.ConfigMap{}
			Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), got)).To(Succeed())
			Expect(got.Data).To(Equal(map[string]string{"k": "v"}))
			Expect(got.UID).To(Equal(cm.UID))
		}
	})
})
