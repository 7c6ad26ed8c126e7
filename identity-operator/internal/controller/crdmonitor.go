package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// crdMonitor is a manager runnable that reads the InferencePool CRD,
// uncached, every interval while the operator runs, and records in serving
// whether it serves v1 InferencePools. The REST mapper keeps a mapping it
// learned and the pool informer keeps the pools it last listed, so without
// it a CRD deleted, or no longer serving v1, while the operator runs would
// go unnoticed until a restart. When what it reads changes, it requeues
// every binding whose poolRef names an InferencePool, so those bindings
// report InferencePoolCRDMissing (and withdraw their outputs) or recover
// within about one interval. A failed read changes nothing.
type crdMonitor struct {
	reader   client.Reader
	bindings client.Reader
	serving  *pool.Serving
	requeue  chan<- event.TypedGenericEvent[*v1alpha1.IdentityBinding]
	interval time.Duration
	log      logr.Logger

	// lastErr is the last read error logged, so a lasting one (RBAC of an
	// older release) is logged once, not every interval.
	lastErr string
	// requeuePending is set while a change of serving has not yet been
	// followed by the requeue of every binding to an InferencePool (the
	// list failed, or ctx ended): the next check tries again.
	requeuePending bool
}

// Start implements manager.Runnable: it checks at once, then every
// interval, until ctx ends.
func (m *crdMonitor) Start(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, m.interval, true, func(ctx context.Context) (bool, error) {
		m.check(ctx)
		return false, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("monitor the InferencePool CRD: %w", err)
	}
	return nil
}

// check reads the CRD once and, when whether it serves v1 InferencePools
// changed, records it and requeues the bindings to InferencePools.
func (m *crdMonitor) check(ctx context.Context) {
	why, err := pool.ReadCRDServing(ctx, m.reader)
	if err != nil {
		if msg := err.Error(); msg != m.lastErr {
			m.log.Error(err, "reading the InferencePool CRD; what was last read of it stands", "interval", m.interval)
			m.lastErr = msg
		}
		return
	}
	m.lastErr = ""
	if m.serving.Set(why) {
		m.requeuePending = true
		m.logChange(why)
	}
	if !m.requeuePending {
		return
	}
	bindings, err := inferencePoolBindingsIn(ctx, m.bindings)
	if err != nil {
		m.log.Error(err, "requeue the bindings to InferencePools after an InferencePool CRD change; trying again at the next check")
		return
	}
	for _, b := range bindings {
		select {
		case m.requeue <- event.TypedGenericEvent[*v1alpha1.IdentityBinding]{Object: b}:
		case <-ctx.Done():
			return
		}
	}
	m.requeuePending = false
}

// logChange says what the change of the CRD means for the bindings.
func (m *crdMonitor) logChange(why string) {
	if why != "" {
		m.log.Info("InferencePool CRD does not serve v1 InferencePools: bindings to InferencePools report InferencePoolCRDMissing and withdraw their outputs",
			"crd", pool.InferencePoolCRDName, "reason", why)
	} else {
		m.log.Info("InferencePool CRD serves v1 InferencePools: requeueing the bindings that reference one", "crd", pool.InferencePoolCRDName)
	}
}
