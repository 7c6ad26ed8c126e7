// Command demo is `make demo`: it starts a local control plane and a
// spire-server, runs the three operators under their own RBAC (as pods on a
// real node, deployed with make deploy-<operator>, where the machine can run
// one; as processes otherwise),
// applies hack/demo/*.yaml and every operator's config/samples, prints what
// happened, and keeps running until Ctrl-C with the kubeconfig path printed.
// Where the machine can run a real node (root, Linux, cgroup v1), it also
// runs pods and prints the SVID a registered pod received and the refusal
// an unregistered one got.
// Every process and temporary file is cleaned up on exit, also on a second
// Ctrl-C or a failure.
package main

import (
	"context"
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/framework"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() (err error) {
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	local, asPods, err := start(ctx)
	if err != nil {
		return err
	}
	stopped := make(chan error, 1)
	stop := func() {
		fmt.Println("\n[trustplane] stopping operators, spire-server and the control plane (Ctrl-C again to force)")
		go func() { stopped <- local.Stop() }()
		select {
		case err := <-stopped:
			if err != nil {
				fmt.Fprintln(os.Stderr, "cleanup:", err)
			}
		case <-signals:
			fmt.Println("[trustplane] forced: killing everything now")
			local.Kill()
		}
	}
	defer stop()

	if err := applyAll(ctx, local); err != nil {
		return err
	}
	fmt.Println("[trustplane] waiting for the operators to settle")
	waitSettled(ctx, local)
	report(ctx, local)
	if asPods {
		fmt.Println("\n=== The operators, deployed as pods (make deploy-<operator>) ===")
		out, err := kubectl(ctx, local, "get", "deployments,pods", "-n", framework.Namespace, "-o", "wide")
		if err != nil {
			out = err.Error()
		}
		fmt.Print(indent(out))
	}
	if w, err := local.Workloads(); err != nil {
		fmt.Printf("\n[trustplane] pods do not run here, so this demo shows entries only: %v\n", err)
	} else if err := showPods(ctx, local, w); err != nil {
		return err
	}

	fmt.Printf(`
The demo keeps running. Try:
  export KUBECONFIG=%s
  %s get spifferegistrations,spiffeentries,trustbundles
  %s get identitybindings -A
  %s entry show -socketPath %s
Press Ctrl-C to stop and clean up.
`, local.KubeconfigPath(), kubectlPath(), kubectlPath(), spireServerPath(), local.Spire().SocketPath)
	<-signals
	return nil
}

// start runs the operators as pods on a real node where the machine can run
// one, and says so; as processes otherwise.
func start(ctx context.Context) (*framework.Local, bool, error) {
	if err := testenv.NodePreflight(); err != nil {
		fmt.Printf("[trustplane] the operators run as processes: %v\n", err)
		l, err := framework.StartLocal(ctx, framework.LocalOptions{Progress: os.Stdout, RealNode: true})
		return l, false, err
	}
	d, err := framework.StartDeployed(ctx, framework.LocalOptions{Progress: os.Stdout})
	if err != nil {
		return nil, false, err
	}
	return d.Local, true, nil
}

func spireServerPath() string {
	p, err := testenv.Binary("spire-server")
	if err != nil {
		return "spire-server"
	}
	return p
}

func kubectlPath() string {
	p, err := testenv.Binary("kubectl")
	if err != nil {
		return "kubectl"
	}
	return p
}

func kubectl(ctx context.Context, l *framework.Local, args ...string) (string, error) {
	args = append([]string{"--kubeconfig", l.KubeconfigPath()}, args...)
	out, err := exec.CommandContext(ctx, kubectlPath(), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// applyAll applies the demo workloads (with a field manager of their own, so
// the samples' apply of the same namespaces keeps their labels), then every
// operator's config/samples kustomization, as a user would.
func applyAll(ctx context.Context, l *framework.Local) error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	demo, _ := filepath.Glob(filepath.Join(root, "hack", "demo", "*.yaml"))
	for _, f := range demo {
		if err := apply(ctx, l, root, f, "-f", f, "--field-manager=trustplane-demo"); err != nil {
			return err
		}
	}
	for _, op := range framework.Operators {
		dir := filepath.Join(root, op, "config", "samples")
		if err := apply(ctx, l, root, dir, "-k", dir); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, l *framework.Local, root, path string, args ...string) error {
	rel, _ := filepath.Rel(root, path)
	fmt.Printf("[trustplane] applying %s\n", rel)
	out, err := kubectl(ctx, l, append([]string{"apply", "--server-side"}, args...)...)
	if err != nil {
		return err
	}
	fmt.Print(indent(out))
	return nil
}

// waitSettled waits until every Trustplane object has a Ready condition, or 60s.
func waitSettled(ctx context.Context, l *framework.Local) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, err := kubectl(ctx, l, "get", "spiffeentries,spifferegistrations,identitybindings,trustbundles", "-A",
			"-o", `jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}`)
		if err == nil && !strings.Contains(out, "=\n") && strings.TrimSpace(out) != "" {
			return
		}
		time.Sleep(time.Second) // the demo polls; nothing is asserted here
	}
}

func report(ctx context.Context, l *framework.Local) {
	section := func(title string) { fmt.Printf("\n=== %s ===\n", title) }

	section("SPIRE entries (spire-server entry show)")
	out, err := l.Spire().CLI(ctx, "entry", "show")
	if err != nil {
		fmt.Println(err)
	}
	fmt.Print(indent(out))

	for _, q := range []struct{ title, resource string }{
		{"SpiffeRegistrations", "spifferegistrations"},
		{"SpiffeEntries", "spiffeentries"},
		{"IdentityBindings", "identitybindings"},
		{"TrustBundles", "trustbundles"},
	} {
		section(q.title)
		out, err := kubectl(ctx, l, "get", q.resource, "-A", "-o", "wide")
		if err != nil {
			out = err.Error()
		}
		fmt.Print(indent(out))
	}

	section("Bundle ConfigMaps written by bundle-operator")
	cms := &corev1.ConfigMapList{}
	if err := l.Client().List(ctx, cms, client.HasLabels{"bundle.trustplane.dev/trustbundle"}); err != nil {
		fmt.Println("  ", err)
	}
	for _, cm := range cms.Items {
		keys := make([]string, 0, len(cm.Data))
		for k, v := range cm.Data {
			keys = append(keys, fmt.Sprintf("%s (%d bytes)", k, len(v)))
		}
		sort.Strings(keys)
		fmt.Printf("  %s/%s: %s; %d certificate(s) in the PEM\n", cm.Namespace, cm.Name, strings.Join(keys, ", "),
			strings.Count(strings.Join(mapValues(cm.Data), ""), "BEGIN CERTIFICATE")/max(1, countPEMKeys(cm.Data)))
	}

	section("Webhooks with an injected caBundle")
	out, err = kubectl(ctx, l, "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o",
		`jsonpath={range .items[*]}{.kind}/{.metadata.name}: inject={.metadata.annotations.bundle\.trustplane\.dev/inject} caBundle bytes={.webhooks[0].clientConfig.caBundle}{"\n"}{end}`)
	if err != nil {
		out = err.Error()
	}
	fmt.Print(indent(shortenCABundles(out)))
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// countPEMKeys counts the keys holding PEM, so the certificate count is per bundle.
func countPEMKeys(m map[string]string) int {
	n := 0
	for _, v := range m {
		if strings.Contains(v, "BEGIN CERTIFICATE") {
			n++
		}
	}
	return n
}

func indent(s string) string {
	if strings.TrimSpace(s) == "" {
		return "  (none)\n"
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, line := range lines {
		lines[i] = "  " + line
	}
	return strings.Join(lines, "\n") + "\n"
}

func sortLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// shortenCABundles replaces each base64 caBundle by its length.
func shortenCABundles(s string) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if i := strings.Index(line, "caBundle bytes="); i >= 0 {
			line = fmt.Sprintf("%s%d (base64)", line[:i+len("caBundle bytes=")], len(line)-i-len("caBundle bytes="))
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}
