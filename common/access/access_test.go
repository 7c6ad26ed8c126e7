package access_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/access"
	"github.com/trustplane/trustplane/common/testenv"
)

// A user whose Role allows only create and get on ConfigMaps in one
// namespace, so that RBAC forbids its updates; and an admission policy
// that forbids (403, as a denying webhook answers) ConfigMaps carrying
// the label refuse=yes, whoever writes them.
var _ = Describe("ExplainForbidden", Ordered, func() {
	var (
		ns   string
		user client.Client
	)
	BeforeAll(func(ctx context.Context) {
		ns = cp.Namespace(ctx)
		name := "access-tester"
		for _, obj := range []client.Object{
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}}}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}},
		} {
			Expect(cp.Client.Create(ctx, obj)).To(Succeed())
		}
		cfg, err := cp.UserConfig(name, []string{"system:authenticated"})
		Expect(err).NotTo(HaveOccurred())
		user, err = client.New(cfg, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		refuseLabelled(ctx, "access-refuse-labelled")
	})

	It("names the caller's missing permission when RBAC forbids the write", func(ctx context.Context) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rbac"}}
		Expect(user.Create(ctx, cm)).To(Succeed())
		cm.Data = map[string]string{"k": "v"}
		err := user.Update(ctx, cm)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "RBAC does not forbid the update: %v", err)

		explained := access.ExplainForbidden(ctx, user, "update", cm, err)
		var denied *access.CallerDeniedError
		Expect(errors.As(explained, &denied)).To(BeTrue(), "not explained as the caller's: %v", explained)
		Expect(*denied).To(MatchFields(denied, "update", "", "configmaps", ns, "rbac"))
		Expect(access.IsCallerDenied(explained)).To(BeTrue())
		Expect(errors.Is(explained, err)).To(BeTrue(), "the API server's answer is not wrapped")
		Expect(explained.Error()).To(ContainSubstring(`grant "update" on "configmaps"`))
	})

	It("names no object for a create, as RBAC judges a create by no name", func(ctx context.Context) {
		other := cp.Namespace(ctx)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "elsewhere"}}
		err := user.Create(ctx, cm)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "RBAC does not forbid the create: %v", err)
		var denied *access.CallerDeniedError
		Expect(errors.As(access.ExplainForbidden(ctx, user, "create", cm, err), &denied)).To(BeTrue())
		Expect(*denied).To(MatchFields(denied, "create", "", "configmaps", other, ""))
	})

	It("returns an admission refusal unchanged: the caller may make the write", func(ctx context.Context) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admission", Labels: map[string]string{"refuse": "yes"}}}
		var err error
		Eventually(func() bool {
			err = user.Create(ctx, cm, client.DryRunAll)
			return apierrors.IsForbidden(err)
		}).WithTimeout(time.Minute).Should(BeTrue(), "the policy does not refuse yet")
		err = user.Create(ctx, cm)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the policy does not forbid the create: %v", err)

		explained := access.ExplainForbidden(ctx, user, "create", cm, err)
		Expect(explained).To(BeIdenticalTo(err))
		Expect(access.IsCallerDenied(explained)).To(BeFalse())
	})

	It("returns any other error unchanged and asks nothing", func(ctx context.Context) {
		notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "x"}}
		Expect(access.ExplainForbidden(ctx, user, "update", cm, notFound)).To(BeIdenticalTo(notFound))
		Expect(access.ExplainForbidden(ctx, user, "update", cm, nil)).To(Succeed())
	})

	It("says whose refusal it was is unknown when it cannot ask, and is then no Forbidden", func(ctx context.Context) {
		// A kind the API server does not serve: its resource cannot be named.
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(schema.GroupVersionKind{Group: "unknown.example.org", Version: "v1", Kind: "Nothing"})
		u.SetName("x")
		forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "unknown.example.org", Resource: "nothings"}, "x", fmt.Errorf("denied"))
		explained := access.ExplainForbidden(ctx, user, "update", u, forbidden)
		var unexplained *access.UnexplainedError
		Expect(errors.As(explained, &unexplained)).To(BeTrue(), "%v", explained)
		Expect(apierrors.IsForbidden(explained)).To(BeFalse(), "an unexplained refusal reads as the object's")
		Expect(access.IsCallerDenied(explained)).To(BeFalse())
		Expect(explained.Error()).To(And(ContainSubstring("denied"), ContainSubstring("unknown")))
	})
})

// MatchFields matches a CallerDeniedError's request fields.
func MatchFields(_ *access.CallerDeniedError, verb, group, resource, namespace, name string) OmegaMatcher {
	return WithTransform(func(d access.CallerDeniedError) []string {
		return []string{d.Verb, d.Group, d.Resource, d.Namespace, d.Name}
	}, Equal([]string{verb, group, resource, namespace, name}))
}

// refuseLabelled installs a ValidatingAdmissionPolicy that forbids
// ConfigMaps labelled refuse=yes with reason Forbidden.
func refuseLabelled(ctx context.Context, name string) {
	GinkgoHelper()
	_, err := testenv.RefuseWrites(ctx, cp.Client, testenv.Refusal{Name: name, Resource: "configmaps", Operations: []string{"CREATE", "UPDATE"},
		Expression: "!has(object.metadata.labels) || !('refuse' in object.metadata.labels) || object.metadata.labels['refuse'] != 'yes'",
		Reason:     "Forbidden", Message: "labelled refuse=yes"})
	Expect(err).NotTo(HaveOccurred())
}
