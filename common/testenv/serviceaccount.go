package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// ServiceAccountAccess is an identity that holds only an operator's
// generated ClusterRole.
type ServiceAccountAccess struct {
	// Config authenticates as the service account (a client certificate
	// whose user and groups are the service account's, so RBAC treats it
	// exactly as the account).
	Config *rest.Config
	// KubeconfigPath is the same identity as a kubeconfig file, for processes.
	KubeconfigPath string
}

// AsServiceAccount applies the ClusterRole in roleFile unchanged (as
// controller-gen writes config/rbac/role.yaml), binds it to the service
// account namespace/name (creating both), and returns that identity. Running
// an operator as it proves its generated RBAC is enough.
func (cp *ControlPlane) AsServiceAccount(ctx context.Context, namespace, name, roleFile string) (*ServiceAccountAccess, error) {
	data, err := os.ReadFile(roleFile)
	if err != nil {
		return nil, fmt.Errorf("read role: %w", err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		return nil, fmt.Errorf("decode ClusterRole in %s: %w", roleFile, err)
	}
	objects := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
		role,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-" + namespace + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
		},
	}
	// client-go's scheme, which holds RBAC and core types whatever the
	// suite's scheme registers.
	admin, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	for _, obj := range objects {
		if err := admin.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	user := "system:serviceaccount:" + namespace + ":" + name
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	cfg, err := cp.UserConfig(user, groups)
	if err != nil {
		return nil, err
	}
	path, err := cp.WriteKubeconfig(user, groups)
	if err != nil {
		return nil, err
	}
	return &ServiceAccountAccess{Config: cfg, KubeconfigPath: path}, nil
}

// BindRoles creates every Role in roleFile (a YAML stream; its other
// documents, such as RoleBindings to the default service account, are
// skipped) and binds each to the service account namespace/name, as one
// more replica of an operator needs its leader election and source Roles.
func (cp *ControlPlane) BindRoles(ctx context.Context, roleFile, namespace, name string) error {
	data, err := os.ReadFile(roleFile)
	if err != nil {
		return fmt.Errorf("read roles: %w", err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("decode %s: %w", roleFile, err)
		}
		if meta.Kind != "Role" {
			continue
		}
		role := &rbacv1.Role{}
		if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil {
			return fmt.Errorf("decode Role in %s: %w", roleFile, err)
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: role.Namespace, Name: role.Name + "-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
		}
		for _, obj := range []client.Object{role, binding} {
			if err := cp.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
			}
		}
	}
	return nil
}

// ServiceAccountToken creates the service account namespace/name (and its
// namespace) when they are not there, and returns a token the API server
// issues for it (a TokenRequest), as a pod of that account holds: what a
// client of the operator's own servers, a metrics scraper say, presents.
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	admin, err := client.New(cp.Config, client.Options{})
	if err != nil {
		return "", fmt.Errorf("admin client: %w", err)
	}
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
	} {
		if err := admin.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
		}
	}
	tr := &authnv1.TokenRequest{}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := admin.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("token of service account %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}
