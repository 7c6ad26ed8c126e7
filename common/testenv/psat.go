package testenv

import (
	"context"
	"fmt"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The SPIRE agent's service account on a real node, as a DaemonSet would
// run it, and the audience of its token.
const (
	SpireAgentNamespace      = "spire-system"
	SpireAgentServiceAccount = "spire-agent"
	SpireServerAudience      = "spire-server"
)

// spireServerUser is the identity the SPIRE server's k8s_psat attestor
// reviews tokens as.
const spireServerUser = "trustplane:spire-server"

// SpireServerKubeconfig writes a kubeconfig for the SPIRE server's k8s_psat
// node attestor, holding only what it needs: creating TokenReviews and
// reading pods and nodes.
func (cp *ControlPlane) SpireServerKubeconfig(ctx context.Context) (string, error) {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "trustplane-spire-server"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "trustplane-spire-server"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: spireServerUser}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := cp.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	return cp.WriteKubeconfig(spireServerUser, nil)
}

// ProjectAgentToken does for the SPIRE agent what a DaemonSet's projected
// service-account token volume does: it runs the agent's pod on this node
// (spire-system/spire-agent-<node>, holding only the pause container; the
// agent itself runs on the host) and writes to path a token bound to that
// pod with the audience spire-server. The server's k8s_psat attestor reviews
// it and finds the node through the pod.
func (n *Node) ProjectAgentToken(ctx context.Context, c client.Client, path string) error {
	objects := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SpireAgentNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: SpireAgentNamespace, Name: SpireAgentServiceAccount}},
	}
	for _, obj := range objects {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: SpireAgentNamespace, Name: "spire-agent-" + n.Name, Labels: map[string]string{"app": "spire-agent"}},
		Spec: corev1.PodSpec{
			NodeName:                     n.Name,
			ServiceAccountName:           SpireAgentServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "anchor", Image: PauseImage, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if err := c.Create(ctx, pod); err != nil {
		return fmt.Errorf("create the agent's pod: %w", err)
	}
	if err := n.waitFor(ctx, "pod "+SpireAgentNamespace+"/"+pod.Name, 2*time.Minute, n.process("kubelet"), func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("phase %s", pod.Status.Phase)
		}
		return nil
	}); err != nil {
		return err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: SpireAgentNamespace, Name: SpireAgentServiceAccount}}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{SpireServerAudience},
		ExpirationSeconds: ptr.To(int64(24 * 3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.SubResource("token").Create(ctx, sa, req); err != nil {
		return fmt.Errorf("request the agent's token: %w", err)
	}
	if err := os.WriteFile(path, []byte(req.Status.Token), 0o600); err != nil {
		return fmt.Errorf("write the agent's token: %w", err)
	}
	return nil
}
