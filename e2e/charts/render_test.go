package charts_test

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// rendering is the output of helm template, as text and as objects.
type rendering struct {
	raw     []byte
	objects []unstructured.Unstructured
}

// template runs helm template on the chart with the values files (absolute
// or relative to the chart) and --set values, for a release tp in namespace.
func template(t *testing.T, namespace string, files []string, sets ...string) (rendering, error) {
	t.Helper()
	return templateAs(t, "tp", namespace, files, sets...)
}

// templateAs is template for a release of another name.
func templateAs(t *testing.T, release, namespace string, files []string, sets ...string) (rendering, error) {
	t.Helper()
	args := []string{"template", release, chartDir(), "--namespace", namespace}
	for _, f := range files {
		if !filepath.IsAbs(f) {
			f = filepath.Join(chartDir(), f)
		}
		args = append(args, "--values", f)
	}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := run(t, nil, env.helm, args...)
	if err != nil {
		return rendering{}, err
	}
	objs, err := decode(out)
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	return rendering{raw: out, objects: objs}, nil
}

// mustTemplate is template that fails the test on an error.
func mustTemplate(t *testing.T, namespace string, files []string, sets ...string) rendering {
	t.Helper()
	r, err := template(t, namespace, files, sets...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func decode(raw []byte) ([]unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var objs []unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, unstructured.Unstructured{Object: m})
	}
}

// find returns the objects of a kind.
func (r rendering) find(kind string) []unstructured.Unstructured {
	var out []unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// object returns the object of a kind and name, failing the test without it.
func (r rendering) object(t *testing.T, kind, name string) unstructured.Unstructured {
	t.Helper()
	for _, o := range r.find(kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the rendering has no %s %s", kind, name)
	return unstructured.Unstructured{}
}

// objectIn returns the object of a kind in a namespace, failing the test
// without it.
func (r rendering) objectIn(t *testing.T, kind, namespace, name string) unstructured.Unstructured {
	t.Helper()
	for _, o := range r.find(kind) {
		if o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("the rendering has no %s %s/%s", kind, namespace, name)
	return unstructured.Unstructured{}
}

// deployment returns an operator's Deployment, typed.
func (r rendering) deployment(t *testing.T, operator string) *appsv1.Deployment {
	t.Helper()
	u := r.object(t, "Deployment", operator)
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatalf("Deployment %s: %v", operator, err)
	}
	return &d
}

// args returns the manager container's arguments of an operator.
func (r rendering) args(t *testing.T, operator string) []string {
	t.Helper()
	d := r.deployment(t, operator)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%s has %d containers, want the manager alone", operator, len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0].Args
}

func metaName(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
