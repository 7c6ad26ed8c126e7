package testenv_test

import (
	"context"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("harness failure reporting", func() {
	It("names the build command when a tool is missing", func() {
		GinkgoT().Setenv("TRUSTPLANE_CACHE", GinkgoT().TempDir())
		_, err := testenv.Binary("spire-server")
		Expect(err).To(MatchError(ContainSubstring("hack/build-tools.sh")))
		_, err = testenv.Binary("no-such-tool")
		Expect(err).To(MatchError(ContainSubstring(`unknown tool "no-such-tool"`)))
		_, err = testenv.StartControlPlane(testenv.ControlPlaneOptions{})
		Expect(err).To(MatchError(ContainSubstring("is not built")))
	})

	It("reports a spire-server that cannot start, with its log", func() {
		_, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "Not A Trust Domain"})
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spire-server exited before it was healthy"))
		Expect(err.Error()).To(ContainSubstring("--- spire-server log ---"))
	})

	It("runs the server at the log level asked for (DEBUG by default, INFO for benchmarks)", func() {
		for level, wantDebug := range map[string]bool{"": true, "INFO": false} {
			spire, err := testenv.StartSpire(testenv.SpireOptions{LogLevel: level})
			Expect(err).NotTo(HaveOccurred())
			Expect(spire.Logs()).To(ContainSubstring("Starting Server APIs"))
			if wantDebug {
				Expect(spire.Logs()).To(ContainSubstring("level=debug"), "log level %q", level)
			} else {
				Expect(spire.Logs()).NotTo(ContainSubstring("level=debug"), "log level %q", level)
			}
			Expect(spire.Cleanup()).To(Succeed())
		}
	})

	It("reads the server's local X.509 authorities, and names an answer it cannot read", func(ctx context.Context) {
		spire, err := testenv.StartSpire(testenv.SpireOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(spire.Cleanup)
		out, err := spire.CLI(ctx, testenv.LocalAuthorityArgs("show")...)
		Expect(err).NotTo(HaveOccurred(), out)
		ids, err := testenv.ParseLocalAuthorities(out)
		Expect(err).NotTo(HaveOccurred())
		Expect(ids["active"]).To(MatchRegexp("^[0-9a-f]{40}$"))
		_, err = testenv.ParseLocalAuthorities("not json")
		Expect(err).To(MatchError(ContainSubstring(`parse localauthority answer "not json"`)))
	})

	It("stops, reports and cleans up a running server and agent", func(ctx context.Context) {
		spire, err := testenv.StartSpire(testenv.SpireOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(spire.Running()).To(BeTrue())
		Expect(spire.Logs()).To(ContainSubstring("Starting Server APIs"))
		agent, err := spire.StartAgent(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(agent.Logs()).To(ContainSubstring("Node attestation was successful"))
		Expect(agent.Cleanup()).To(Succeed())
		Expect(agent.Stop()).To(Succeed(), "stopping twice is harmless")
		Expect(spire.Cleanup()).To(Succeed())
		Expect(spire.Running()).To(BeFalse())
		_, statErr := os.Stat(spire.Dir)
		Expect(os.IsNotExist(statErr)).To(BeTrue())
	})
})

var _ = Describe("Process", func() {
	It("kills a process that ignores SIGTERM after the timeout", func() {
		p, err := testenv.StartProcess(testenv.ProcessOptions{Name: "stubborn", Path: "/bin/sh",
			Args: []string{"-c", `trap "" TERM; echo started; while true; do sleep 1; done`}, LogPath: GinkgoT().TempDir() + "/log"})
		Expect(err).NotTo(HaveOccurred())
		Eventually(p.Logs).Should(ContainSubstring("started"))
		Expect(p.Stop(500 * time.Millisecond)).To(MatchError(ContainSubstring("ignored SIGTERM")))
		Expect(p.Exited()).To(BeTrue())
		Expect(p.ExitError()).To(HaveOccurred())
	})

	It("kills at once like a crash", func() {
		p, err := testenv.StartProcess(testenv.ProcessOptions{Name: "sleeper", Path: "/bin/sleep", Args: []string{"60"},
			LogPath: GinkgoT().TempDir() + "/log"})
		Expect(err).NotTo(HaveOccurred())
		Expect(p.Pid()).To(BeNumerically(">", 0))
		Expect(p.Kill()).To(Succeed())
		Expect(p.Exited()).To(BeTrue())
	})
})

var _ = Describe("ModuleDir", func() {
	It("finds a pinned module in the module cache, and names a module that does not exist", func() {
		dir, err := testenv.ModuleDir("sigs.k8s.io/gateway-api-inference-extension@v1.0.0")
		Expect(err).NotTo(HaveOccurred())
		Expect(dir).To(BeADirectory())
		_, err = testenv.ModuleDir("example.invalid/no-such-module@v0.0.1")
		Expect(err).To(MatchError(ContainSubstring("example.invalid/no-such-module@v0.0.1")))
	})
})
