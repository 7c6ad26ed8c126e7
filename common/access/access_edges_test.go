package access_test

import (
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/access"
)

// The review is a second request, judged later than the write. A role
// fixed in between (an administrator granting the missing verb, or, with
// several API servers, one whose authorizer is fresher than the one that
// judged the write) makes the review say "allowed", and the caller's own
// refusal reads as admission's. ExplainForbidden cannot tell; its doc says
// so. RecheckForbidden sends the write again after the review, and it
// passes (identity-operator: TestARoleGrantedBetweenTheWriteAnd-
// ItsReviewDoesNotWithdrawTheOutputs).
var _ = Describe("ExplainForbidden after a role fixed between the write and the review", func() {
	It("returns the answer unchanged, as admission's", func(ctx context.Context) {
		ns := cp.Namespace(ctx)
		name := "access-race"
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}}}
		Expect(cp.Client.Create(ctx, role)).To(Succeed())
		Expect(cp.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}})).To(Succeed())
		cfg, err := cp.UserConfig(name, []string{"system:authenticated"})
		Expect(err).NotTo(HaveOccurred())
		user, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())

		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "raced"}}
		Eventually(func() error { return user.Create(ctx, cm) }).WithTimeout(time.Minute).Should(Succeed())
		cm.Data = map[string]string{"k": "v"}
		writeErr := user.Update(ctx, cm)
		Expect(apierrors.IsForbidden(writeErr)).To(BeTrue(), "RBAC does not forbid the update: %v", writeErr)

		By("the role is fixed before the review is made")
		role.Rules[0].Verbs = append(role.Rules[0].Verbs, "update")
		Expect(cp.Client.Update(ctx, role)).To(Succeed())
		Eventually(func(g Gomega) bool {
			r := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "update", Resource: "configmaps", Namespace: ns, Name: "raced"}}}
			g.Expect(user.Create(ctx, r)).To(Succeed())
			return r.Status.Allowed
		}).WithTimeout(time.Minute).Should(BeTrue())

		Expect(access.ExplainForbidden(ctx, user, "update", cm, writeErr)).To(BeIdenticalTo(writeErr))

		By("RecheckForbidden sends the write again after the review: it passes, and the write is made")
		Expect(access.RecheckForbidden(ctx, user, "update", cm, writeErr, func(ctx context.Context) error {
			return user.Update(ctx, cm)
		})).To(Succeed())
		got := &corev1.ConfigMap{}
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(cm), got)).To(Succeed())
		Expect(got.Data).To(HaveKeyWithValue("k", "v"))
	})
})

// RecheckForbidden, when the review allows the write: the recheck's
// answer, judged after the review, decides.
var _ = Describe("RecheckForbidden", func() {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("denied by a policy"))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x"}}

	It("returns the refusal when the recheck is forbidden too: admission's", func(ctx context.Context) {
		again := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("denied again"))
		Expect(access.RecheckForbidden(ctx, cp.Client, "update", cm, forbidden, func(context.Context) error { return again })).
			To(BeIdenticalTo(error(forbidden)))
	})

	It("keeps the review's reading when the recheck conflicts: the object changed meanwhile, and the recheck could not judge", func(ctx context.Context) {
		conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "x", errors.New("changed meanwhile"))
		Expect(access.RecheckForbidden(ctx, cp.Client, "update", cm, forbidden, func(context.Context) error { return conflict })).
			To(BeIdenticalTo(error(forbidden)))
	})

	It("returns the recheck's answer when it is about the object: the write met that now", func(ctx context.Context) {
		for _, answer := range []error{
			apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, "x"),
			apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x"),
			apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "x", nil),
		} {
			Expect(access.RecheckForbidden(ctx, cp.Client, "update", cm, forbidden, func(context.Context) error { return answer })).
				To(BeIdenticalTo(answer))
		}
	})

	It("says whose refusal it was is unknown when the recheck fails otherwise", func(ctx context.Context) {
		unavailable := apierrors.NewServiceUnavailable("shedding load")
		got := access.RecheckForbidden(ctx, cp.Client, "update", cm, forbidden, func(context.Context) error { return unavailable })
		var unexplained *access.UnexplainedError
		Expect(errors.As(got, &unexplained)).To(BeTrue(), "%v", got)
		Expect(apierrors.IsForbidden(got)).To(BeFalse())
		Expect(got.Error()).To(ContainSubstring("shedding load"))
	})

	It("rechecks nothing unless the review allows the write", func(ctx context.Context) {
		called := false
		recheck := func(context.Context) error { called = true; return nil }
		notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x")
		Expect(access.RecheckForbidden(ctx, cp.Client, "update", cm, notFound, recheck)).To(BeIdenticalTo(error(notFound)))
		Expect(access.RecheckForbidden(ctx, cp.Client, "update", cm, nil, recheck)).To(Succeed())
		Expect(called).To(BeFalse())
	})
})

// An unstructured object of a cluster-scoped kind in a named API group, as identity-operator writes a
// ClusterSPIFFEID: the resource comes from the RESTMapper, the review names
// the group and no namespace.
var _ = Describe("ExplainForbidden of an unstructured cluster-scoped object", func() {
	It("names the group and resource, at the cluster scope", func(ctx context.Context) {
		cfg, err := cp.UserConfig("access-nobody", []string{"system:authenticated"})
		Expect(err).NotTo(HaveOccurred())
		user, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(rbacv1.SchemeGroupVersion.WithKind("ClusterRole"))
		u.SetName("access-cluster-scoped")
		err = user.Create(ctx, u)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		var denied *access.CallerDeniedError
		Expect(errors.As(access.ExplainForbidden(ctx, user, "create", u, err), &denied)).To(BeTrue())
		Expect(*denied).To(MatchFields(denied, "create", rbacv1.GroupName, "clusterroles", "", ""))
		Expect(denied.Error()).To(ContainSubstring("at the cluster scope"))
	})
})
