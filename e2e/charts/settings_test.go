package charts_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// managerEnv returns the environment of op's manager container in its
// config/manager/manager.yaml (values set inline; one taken from elsewhere
// is "").
func managerEnv(t *testing.T, op string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range managerContainer(t, op).Env {
		out[e.Name] = e.Value
	}
	return out
}

// managerContainer returns op's manager container in its
// config/manager/manager.yaml (the Deployment among its documents).
func managerContainer(t *testing.T, op string) corev1.Container {
	t.Helper()
	path := filepath.Join(env.root, op, "config", "manager", "manager.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: no Deployment: %v", path, err)
		}
		if d.Kind != "Deployment" || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		return d.Spec.Template.Spec.Containers[0]
	}
}

// argsWithPrefix returns the arguments of op's manager that start with prefix.
func (r rendering) argsWithPrefix(t *testing.T, op, prefix string) []string {
	t.Helper()
	var got []string
	for _, a := range r.args(t, op) {
		if strings.HasPrefix(a, prefix) {
			got = append(got, a)
		}
	}
	return got
}

// TestDefaultEnvironmentIsConfigDefaults proves the chart gives every
// operator the default environment config/default gives it, so that an
// unlabelled object is reconciled after helm install as after make deploy,
// and that it can be emptied (strict) or set per operator.
func TestDefaultEnvironmentIsConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want map[string][]string
	}{
		{"default", nil, map[string][]string{
			"spiffe-operator": {"--default-environment=default"}, "identity-operator": {"--default-environment=default"},
			"bundle-operator": {"--default-environment=default"}}},
		{"strict", []string{"defaultEnvironment="}, map[string][]string{}},
		{"per operator", []string{"defaultEnvironment=prod", "identityOperator.flags.defaultEnvironment=staging"}, map[string][]string{
			"spiffe-operator": {"--default-environment=prod"}, "identity-operator": {"--default-environment=staging"},
			"bundle-operator": {"--default-environment=prod"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustTemplate(t, "chart-default", nil, tc.sets...)
			for _, op := range operatorimage.Operators() {
				if got := r.argsWithPrefix(t, op.Name, "--default-environment"); !slices.Equal(got, tc.want[op.Name]) {
					t.Errorf("%s: %q, want %q", op.Name, got, tc.want[op.Name])
				}
			}
		})
	}
	_, err := template(t, "chart-default", nil, "defaultEnvironment=prod/eu")
	if err == nil || !strings.Contains(err.Error(), "at '/defaultEnvironment'") {
		t.Errorf("a default environment that is no label value: %v", err)
	}
}

// TestConfigDefaultSetsTheChartsDefaultEnvironment ties the chart's
// default to config/default's, so the two install paths cannot drift.
func TestConfigDefaultSetsTheChartsDefaultEnvironment(t *testing.T) {
	for _, op := range operatorimage.Operators() {
		env := managerEnv(t, op.Name)
		if env["DEFAULT_ENVIRONMENT"] != "default" {
			t.Errorf("%s: config/manager sets DEFAULT_ENVIRONMENT=%q, the chart's default is %q", op.Name, env["DEFAULT_ENVIRONMENT"], "default")
		}
	}
}

// TestCRDsCanBeLeftToAnotherRelease proves a second release (another class
// of spiffe-operator) can leave out the CRDs the first release installed,
// which helm would otherwise refuse to take over.
func TestCRDsCanBeLeftToAnotherRelease(t *testing.T) {
	if crds := mustTemplate(t, "chart-default", nil).find("CustomResourceDefinition"); len(crds) == 0 {
		t.Fatal("the default release installs no CRDs")
	}
	second, err := templateAs(t, "green", "chart-green", nil, "crds.install=false", "identityOperator.enabled=false",
		"bundleOperator.enabled=false", "spiffeOperator.flags.className=green")
	if err != nil {
		t.Fatal(err)
	}
	if crds := second.find("CustomResourceDefinition"); len(crds) != 0 {
		t.Errorf("crds.install=false still renders %d CRDs", len(crds))
	}
	if d := second.deployment(t, "spiffe-operator"); d == nil {
		t.Error("no spiffe-operator Deployment in the second release")
	}
	// Nothing cluster-scoped of the second release has a name of the
	// first's: helm would refuse to take it over.
	first := mustTemplate(t, "chart-default", nil)
	taken := map[string]bool{}
	for _, o := range first.objects {
		if o.GetNamespace() == "" {
			taken[o.GetKind()+"/"+o.GetName()] = true
		}
	}
	for _, o := range second.objects {
		if o.GetNamespace() == "" && taken[o.GetKind()+"/"+o.GetName()] {
			t.Errorf("the second release renders %s %s, which the first holds", o.GetKind(), o.GetName())
		}
	}
}

// TestSettingsTheChartPassesCannotBeShadowed proves a value that would be
// silently overridden fails the install instead, naming it: a variable in
// extraEnv for a flag the chart passes (the flag wins over the variable),
// and the metrics and probe servers on one port.
func TestSettingsTheChartPassesCannotBeShadowed(t *testing.T) {
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"spiffeOperator.extraEnv[0].name=CLUSTER_NAME", "spiffeOperator.extraEnv[0].value=prod"},
			"spiffeOperator.extraEnv sets CLUSTER_NAME, but the chart passes --cluster-name"},
		{[]string{"identityOperator.extraEnv[0].name=TRUST_DOMAIN", "identityOperator.extraEnv[0].value=other.org"},
			"identityOperator.extraEnv sets TRUST_DOMAIN, but the chart passes --trust-domain"},
		{[]string{"bundleOperator.extraEnv[0].name=SPIRE_ADDRESS", "bundleOperator.extraEnv[0].value=spire:8081"},
			"bundleOperator.extraEnv sets SPIRE_ADDRESS, but the chart passes --spire-address"},
		{[]string{"spiffeOperator.flags.requeueAfter=5m", "spiffeOperator.extraEnv[0].name=REQUEUE_AFTER", "spiffeOperator.extraEnv[0].value=1m"},
			"spiffeOperator.extraEnv sets REQUEUE_AFTER, but the chart passes --requeue-after"},
		{[]string{"spiffeOperator.extraEnv[0].name=DEFAULT_ENVIRONMENT", "spiffeOperator.extraEnv[0].value=prod"},
			"spiffeOperator.extraEnv sets DEFAULT_ENVIRONMENT, but the chart passes --default-environment"},
		{[]string{"spiffeOperator.metrics.port=8081"}, "spiffeOperator.metrics.port and spiffeOperator.probePort are both 8081"},
		{[]string{"identityOperator.extraEnv[0].name=PARENT_ID", "identityOperator.extraEnv[0].value=spiffe://example.org/x"},
			"identityOperator.extraEnv sets PARENT_ID, which the chart writes to the ConfigMap identity-operator-settings"},
		{[]string{"identityOperator.extraEnv[0].name=MAX_SVID_TTL", "identityOperator.extraEnv[0].value=8760h"},
			"set identityOperator.flags.maxSvidTtl instead"},
	} {
		t.Run(strings.Join(tc.sets, ","), func(t *testing.T) {
			_, err := template(t, "chart-default", nil, tc.sets...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want an error saying %q, got %v", tc.want, err)
			}
		})
	}
	// A variable for a flag the chart does not pass still works.
	r := mustTemplate(t, "chart-default", nil, "spiffeOperator.extraEnv[0].name=REQUEUE_AFTER", "spiffeOperator.extraEnv[0].value=1m")
	env := r.deployment(t, "spiffe-operator").Spec.Template.Spec.Containers[0].Env
	if !slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == "REQUEUE_AFTER" && e.Value == "1m" }) {
		t.Errorf("REQUEUE_AFTER, a flag the chart does not pass, is not in the environment: %v", env)
	}
}

// TestMakeDeployUsesTheImagesMakeImagesBuilds proves what make
// deploy-<operator> applies without an overlay (hack/installers.sh -
// <operator>) names the image make images builds, not config/manager's
// placeholder, which no build produces.
func TestMakeDeployUsesTheImagesMakeImagesBuilds(t *testing.T) {
	for _, o := range operatorimage.Operators() {
		objs, err := decode(mustRun(t, nil, filepath.Join(env.root, "hack", "installers.sh"), "-", o.Name))
		if err != nil {
			t.Fatal(err)
		}
		var images []string
		for _, obj := range objs {
			if obj.GetKind() != "Deployment" {
				continue
			}
			var d appsv1.Deployment
			fromUnstructured(t, obj.Object, &d)
			for _, c := range d.Spec.Template.Spec.Containers {
				images = append(images, c.Image)
			}
		}
		if !slices.Equal(images, []string{o.Ref("dev")}) {
			t.Errorf("%s: images %q, want %q", o.Name, images, o.Ref("dev"))
		}
	}
}

// TestIdentitySettingsFollowTheValues proves the chart writes
// identity-operator's settings ConfigMap, which the admission policy on
// the operator's writes reads, from the same values as the operator's
// flags, with config/manager/settings.yaml's keys, and that the operator's
// Deployment reads it: otherwise the policy would refuse the operator's
// writes, or hold it to other settings than its own.
func TestIdentitySettingsFollowTheValues(t *testing.T) {
	shipped := shippedSettings(t)
	for _, tc := range []struct {
		sets []string
		want map[string]string
	}{
		{nil, map[string]string{"TRUST_DOMAIN": "example.org", "PARENT_ID": "spiffe://example.org/k8s-cluster-nodes",
			"MAX_SVID_TTL": "24h", "CLUSTER_SPIFFEID_CLASS_NAME": ""}},
		{[]string{"trustDomain=prod.example", "identityOperator.flags.parentId=spiffe://prod.example/nodes",
			"identityOperator.flags.maxSvidTtl=2h", "identityOperator.flags.clusterSpiffeidClassName=prod"},
			map[string]string{"TRUST_DOMAIN": "prod.example", "PARENT_ID": "spiffe://prod.example/nodes",
				"MAX_SVID_TTL": "2h", "CLUSTER_SPIFFEID_CLASS_NAME": "prod"}},
	} {
		t.Run(strings.Join(tc.sets, ","), func(t *testing.T) {
			r := mustTemplate(t, "chart-default", nil, tc.sets...)
			cm := r.objectIn(t, "ConfigMap", "chart-default", "identity-operator-settings")
			data, _, _ := unstructuredMap(cm.Object, "data")
			got := map[string]string{}
			for k, v := range data.(map[string]any) {
				got[k] = v.(string)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("settings %v, want %v", got, tc.want)
			}
			if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(shipped.Data))) {
				t.Errorf("settings keys %v, config/manager/settings.yaml has %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(shipped.Data)))
			}
			c := r.deployment(t, "identity-operator").Spec.Template.Spec.Containers[0]
			for _, problem := range settingsEnvProblems(c, slices.Sorted(maps.Keys(shipped.Data))) {
				t.Errorf("the chart's identity-operator Deployment: %s", problem)
			}
			for flag, key := range map[string]string{"--trust-domain=": "TRUST_DOMAIN", "--parent-id=": "PARENT_ID",
				"--max-svid-ttl=": "MAX_SVID_TTL", "--cluster-spiffeid-class-name=": "CLUSTER_SPIFFEID_CLASS_NAME"} {
				for _, a := range r.argsWithPrefix(t, "identity-operator", flag) {
					if v := strings.TrimPrefix(a, flag); v != tc.want[key] {
						t.Errorf("the Deployment passes %s, the settings say %s=%q", a, key, tc.want[key])
					}
				}
			}
		})
	}
}

// settingsEnvProblems says how container c fails to read each of keys, and
// only those, from identity-operator-settings: one env entry per key that
// takes exactly that key, and no envFrom of the ConfigMap, which would put
// any key someone adds to it (KUBECONFIG, HTTPS_PROXY) in the operator's
// environment.
func settingsEnvProblems(c corev1.Container, keys []string) []string {
	var problems []string
	for _, e := range c.EnvFrom {
		if e.ConfigMapRef != nil && e.ConfigMapRef.Name == "identity-operator-settings" {
			problems = append(problems, "takes every key of identity-operator-settings (envFrom)")
		}
	}
	for _, key := range keys {
		n := 0
		for _, e := range c.Env {
			if e.Name != key {
				continue
			}
			n++
			if ref := e.ValueFrom; ref == nil || ref.ConfigMapKeyRef == nil || ref.ConfigMapKeyRef.Name != "identity-operator-settings" ||
				ref.ConfigMapKeyRef.Key != key || (ref.ConfigMapKeyRef.Optional != nil && *ref.ConfigMapKeyRef.Optional) {
				problems = append(problems, fmt.Sprintf("%s is not the required key %s of identity-operator-settings: %+v", key, key, e))
			}
		}
		if n != 1 {
			problems = append(problems, fmt.Sprintf("%s is set %d times, want once", key, n))
		}
	}
	return problems
}

// shippedSettings returns identity-operator's config/manager/settings.yaml.
func shippedSettings(t *testing.T) corev1.ConfigMap {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(env.root, "identity-operator", "config", "manager", "settings.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped corev1.ConfigMap
	if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(&shipped); err != nil {
		t.Fatal(err)
	}
	return shipped
}

// TestTheManifestReadsOnlyTheNamedSettings holds config/manager/manager.yaml
// (make deploy, the installer) to the same: each key of settings.yaml by
// name, and no other key of the ConfigMap.
func TestTheManifestReadsOnlyTheNamedSettings(t *testing.T) {
	keys := slices.Sorted(maps.Keys(shippedSettings(t).Data))
	for _, problem := range settingsEnvProblems(managerContainer(t, "identity-operator"), keys) {
		t.Errorf("identity-operator/config/manager/manager.yaml: %s", problem)
	}
}
