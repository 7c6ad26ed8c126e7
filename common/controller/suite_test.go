package controller_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/testenv"
)

var cp *testenv.ControlPlane

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "controller")
}

var _ = BeforeSuite(func() {
	log.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	cp, err = testapi.StartControlPlane()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(cp.Stop()).To(Succeed()) })
})

// faultyHandler is the example widget handler with faults injected from the
// spec (spec.fail) and from deleteErr, for failure paths a real handler
// cannot be made to take on demand.
type faultyHandler struct {
	widget.Handler
	deleteErr   func() error
	createCalls int
}

var _ handler.Handler[*widgetv1.Widget] = &faultyHandler{}

// forgettingHandler is a faultyHandler that records the keys it is told
// to forget, and counts its Delete calls.
type forgettingHandler struct {
	*faultyHandler
	forgot  []types.NamespacedName
	deletes int
}

var _ handler.Forgetter = &forgettingHandler{}

// Delete counts the call and deletes as faultyHandler does.
func (f *forgettingHandler) Delete(ctx context.Context, w *widgetv1.Widget) error {
	f.deletes++
	return f.faultyHandler.Delete(ctx, w)
}

// Forget records key.
func (f *forgettingHandler) Forget(key types.NamespacedName) { f.forgot = append(f.forgot, key) }

func (h *faultyHandler) CreateOrUpdate(ctx context.Context, w *widgetv1.Widget) error {
	h.createCalls++
	switch w.Spec.Fail {
	case "blocked":
		return ctrlerrors.WithReason("DependencyMissing", ctrlerrors.BlockedErrorf("waiting for dependency"))
	case "retryable":
		return ctrlerrors.RetryableErrorf("transient failure")
	case "delay":
		return ctrlerrors.RetryableWithDelayErrorf(time.Minute, "come back later")
	case "terminal":
		return errors.New("something is broken for good")
	case "late":
		// Fails after writing the children and declaring their type.
		if err := h.Handler.CreateOrUpdate(ctx, w); err != nil {
			return err
		}
		return errors.New("failed after writing the children")
	}
	return h.Handler.CreateOrUpdate(ctx, w)
}

func (h *faultyHandler) Delete(ctx context.Context, w *widgetv1.Widget) error {
	if h.deleteErr != nil {
		if err := h.deleteErr(); err != nil {
			return err
		}
	}
	return h.Handler.Delete(ctx, w)
}
