package testapi

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/common/testenv"
)

// Suite is the control plane of one Ginkgo suite of the framework's tests:
// started (StartControlPlane) before its specs and stopped after them.
type Suite struct {
	// ControlPlane is set once the suite's BeforeSuite has run.
	*testenv.ControlPlane
	prefix string
}

// NewSuite registers the BeforeSuite that starts the suite's control plane
// and the cleanup that stops it; call it at the top level of a suite
// (var cp = testapi.NewSuite("j-")). Namespace names start with prefix.
func NewSuite(prefix string) *Suite {
	s := &Suite{prefix: prefix}
	BeforeSuite(func() {
		cp, err := StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		s.ControlPlane = cp
		DeferCleanup(func() { Expect(cp.Stop()).To(Succeed()) })
	})
	return s
}

// Namespace creates a namespace for one spec and returns its name.
func (s *Suite) Namespace(ctx context.Context) string {
	name, err := NewNamespace(ctx, s.Client, s.prefix)
	Expect(err).NotTo(HaveOccurred())
	return name
}
