package operator_test

import (
	"context"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

var ctx = context.Background()

func namespace(name string, labels map[string]string) *corev1.Namespace {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	return ns
}

func podTemplate(sa string, labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
}

func deployment(ns, name, sa string, labels map[string]string) *appsv1.Deployment {
	GinkgoHelper()
	return deploymentIn(k8s, ns, name, sa, labels)
}

// deploymentIn creates a Deployment through c (another cluster's client).
func deploymentIn(c client.Client, ns, name, sa string, labels map[string]string) *appsv1.Deployment {
	GinkgoHelper()
	if labels == nil {
		labels = map[string]string{"app": name}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(sa, labels),
		},
	}
	Expect(c.Create(ctx, d)).To(Succeed())
	return d
}

func statefulSet(ns, name, sa string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(sa, labels),
		},
	}
	Expect(k8s.Create(ctx, s)).To(Succeed())
	return s
}

func daemonSet(ns, name, sa string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	d := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: podTemplate(sa, labels),
		},
	}
	Expect(k8s.Create(ctx, d)).To(Succeed())
	return d
}

// policyFor returns a policy selecting namespaces labelled test=<name>,
// parenting its entries under a parent ID of its own.
func policyFor(name string, mut func(*v1alpha1.SpiffeRegistrationSpec)) *v1alpha1.SpiffeRegistration {
	p := &v1alpha1.SpiffeRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.SpiffeRegistrationSpec{
			TrustDomain:       trustDomain,
			ParentID:          parentOf(name),
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test": name}},
		},
	}
	if mut != nil {
		mut(&p.Spec)
	}
	return p
}

func parentOf(name string) string { return "spiffe://" + trustDomain + "/spire/agent/k8s_psat/" + name }

// paths returns the SPIFFE ID paths of the entries under parent, sorted.
func paths(parent string) func() []string {
	return func() []string {
		var out []string
		for _, e := range entriesUnder(parent) {
			out = append(out, e.SpiffeId.Path)
		}
		sort.Strings(out)
		return out
	}
}

func entryAt(parent, path string) *types.Entry {
	for _, e := range entriesUnder(parent) {
		if e.SpiffeId.Path == path {
			return e
		}
	}
	return nil
}

func selectorsOf(e *types.Entry) []string {
	var out []string
	for _, s := range e.GetSelectors() {
		out = append(out, s.Type+":"+s.Value)
	}
	sort.Strings(out)
	return out
}

// readyOf returns the Ready condition's status and reason of a fresh copy of obj.
func readyOf(obj client.Object, conds func() []metav1.Condition) func() string {
	return func() string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return "get: " + err.Error()
		}
		c := meta.FindStatusCondition(conds(), "Ready")
		if c == nil {
			return ""
		}
		return string(c.Status) + "/" + c.Reason
	}
}

func policyReady(p *v1alpha1.SpiffeRegistration) func() string {
	return readyOf(p, func() []metav1.Condition { return p.Status.Conditions })
}

func entryReady(e *v1alpha1.SpiffeEntry) func() string {
	return readyOf(e, func() []metav1.Condition { return e.Status.Conditions })
}

// recordedParents returns the status.parentIDs of a fresh copy of obj.
func recordedParents(obj client.Object) func() []string {
	return func() []string {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return []string{"get: " + err.Error()}
		}
		switch o := obj.(type) {
		case *v1alpha1.SpiffeRegistration:
			return o.Status.ParentIDs
		case *v1alpha1.SpiffeEntry:
			return o.Status.ParentIDs
		}
		return nil
	}
}

// setParent changes the spec.parentID of obj.
func setParent(obj client.Object, parent string) {
	GinkgoHelper()
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	switch o := obj.(type) {
	case *v1alpha1.SpiffeRegistration:
		o.Spec.ParentID = parent
	case *v1alpha1.SpiffeEntry:
		o.Spec.ParentID = parent
	}
	Expect(k8s.Patch(ctx, obj, patch)).To(Succeed())
}
