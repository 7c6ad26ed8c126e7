package e2e_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// The make-deploy label lets make e2e-helm leave these specs out: there the
// operators run from a Helm release, whose objects make deploy would take over.
var _ = Describe("make deploy-<operator>", Label("make-deploy"), func() {
	for _, op := range framework.Operators {
		It("applies "+op+"'s config/default to the cluster, and undeploy would remove it cleanly", smoke, func(ctx context.Context) {
			root, err := framework.RepoRoot()
			Expect(err).NotTo(HaveOccurred())
			cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "-C", root, "deploy-" + op}, cluster.DeployArgs()...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
			out, err := cmd.CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))

			deploy := &appsv1.Deployment{}
			Expect(cluster.Client().Get(ctx, client.ObjectKey{Namespace: framework.Namespace, Name: op}, deploy)).To(Succeed())
			Expect(deploy.Spec.Template.Spec.Containers).NotTo(BeEmpty())
			sc := deploy.Spec.Template.Spec.SecurityContext
			Expect(sc).NotTo(BeNil())
			Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))

			kubectl := filepath.Join(root, "hack", "kubectl.sh")
			script := kubectl + " kustomize " + filepath.Join(root, op, "config", "default") +
				" | " + kubectl + " delete --dry-run=server -f -"
			cmd = exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.KubeconfigPath())
			out, err = cmd.CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
		})
	}
})
