package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// The suite's manager authenticates as the operator's service account bound
// to config/rbac/role.yaml only, so every other spec fails if a marker is
// missing. This spec proves the suite really is constrained: the account
// is denied what the role does not grant.
var _ = Describe("RBAC: the operator runs under its generated ClusterRole only", func() {
	It("denies the operator's identity what role.yaml does not grant", func(ctx context.Context) {
		c := operatorClient()
		Expect(apierrors.IsForbidden(c.List(ctx, &corev1.SecretList{}))).To(BeTrue(), "secrets must be out of reach")
		Expect(apierrors.IsForbidden(c.List(ctx, &corev1.PodList{}))).To(BeTrue(), "the operator never reads pods")
		Expect(c.List(ctx, &spiffev1alpha1.SpiffeEntryList{})).To(Succeed(), "the role grants SpiffeEntries")
	})
})
