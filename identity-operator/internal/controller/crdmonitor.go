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
	"github.com/trustplane/trustplane/identity-operator/internal/boundary"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// pollMonitor is a manager runnable that reads something the operator
// cannot watch (read), uncached, every interval while the operator runs,
// and records what it read (record). When that changes, it requeues every
// binding the change concerns (affected), so their conditions and outputs
// follow within about one interval. A failed read changes nothing.
type pollMonitor struct {
	// what names what is read, in logs.
	what string
	// read returns why the thing read is not as the bindings need it, ""
	// when it is.
	read func(ctx context.Context) (string, error)
	// record keeps what read returned and reports whether it changed.
	record func(why string) bool
	// affected lists the bindings a change concerns.
	affected func(ctx context.Context) ([]*v1alpha1.IdentityBinding, error)
	// logChange says what a change means for the bindings.
	logChange func(why string)
	// unreadable, when set, records that read has failed
	// unreadableAfter times in a row (with the last error) and reports
	// whether that changed what was known; the affected bindings are then
	// requeued as for a change.
	unreadable      func(err error) bool
	unreadableAfter int
	requeue         chan<- event.TypedGenericEvent[*v1alpha1.IdentityBinding]
	interval        time.Duration
	log             logr.Logger

	// lastErr is the last read error logged, so a lasting one (RBAC of an
	// older release) is logged once, not every interval.
	lastErr string
	// requeuePending is set while a change has not yet been followed by the
	// requeue of every affected binding (the list failed, or ctx ended):
	// the next check tries again.
	requeuePending bool
	// failures counts the reads that failed in a row.
	failures int
}

// boundaryUnreadableAfter is how many reads of the boundary's policies in a
// row must fail before the bindings say nothing is known (about a minute
// and a half at the default interval): one failed read is most often the
// API server briefly away.
const boundaryUnreadableAfter = 3

// newCRDMonitor reads the InferencePool CRD and records in serving whether
// it serves v1 InferencePools. The REST mapper keeps a mapping it learned
// and the pool informer keeps the pools it last listed, so without it a CRD
// deleted, or no longer serving v1, while the operator runs would go
// unnoticed until a restart. A change requeues every binding whose poolRef
// names an InferencePool, so those bindings report InferencePoolCRDMissing
// (and withdraw their outputs) or recover.
func newCRDMonitor(reader, bindings client.Reader, serving *pool.Serving, requeue chan<- event.TypedGenericEvent[*v1alpha1.IdentityBinding], interval time.Duration, log logr.Logger) *pollMonitor {
	return &pollMonitor{
		what:   "the InferencePool CRD",
		read:   func(ctx context.Context) (string, error) { return pool.ReadCRDServing(ctx, reader) },
		record: serving.Set,
		affected: func(ctx context.Context) ([]*v1alpha1.IdentityBinding, error) {
			return inferencePoolBindingsIn(ctx, bindings)
		},
		logChange: func(why string) {
			if why != "" {
				log.Info("InferencePool CRD does not serve v1 InferencePools: bindings to InferencePools report InferencePoolCRDMissing and withdraw their outputs",
					"crd", pool.InferencePoolCRDName, "reason", why)
			} else {
				log.Info("InferencePool CRD serves v1 InferencePools: requeueing the bindings that reference one", "crd", pool.InferencePoolCRDName)
			}
		},
		requeue: requeue, interval: interval, log: log,
	}
}

// newBoundaryMonitor reads the identity boundary's admission policies and
// records in state whether they are in force. A change requeues every
// binding, so each reports it (condition BoundaryEnforced).
func newBoundaryMonitor(reader, bindings client.Reader, state *boundary.State, requeue chan<- event.TypedGenericEvent[*v1alpha1.IdentityBinding], interval time.Duration, log logr.Logger) *pollMonitor {
	return &pollMonitor{
		what:   "the identity boundary's admission policies",
		read:   func(ctx context.Context) (string, error) { return boundary.Read(ctx, reader) },
		record: state.Set,
		affected: func(ctx context.Context) ([]*v1alpha1.IdentityBinding, error) {
			var l v1alpha1.IdentityBindingList
			if err := bindings.List(ctx, &l); err != nil {
				return nil, fmt.Errorf("list bindings: %w", err)
			}
			out := make([]*v1alpha1.IdentityBinding, len(l.Items))
			for i := range l.Items {
				out[i] = &l.Items[i]
			}
			return out, nil
		},
		logChange: func(why string) {
			if why != "" {
				log.Error(nil, "the identity boundary's admission policies are not in force: whoever may create a pod can give it any variant's label, and so its identity; install identity-operator/config/policy",
					"problems", why)
			} else {
				log.Info("the identity boundary's admission policies are in force")
			}
		},
		unreadable: func(err error) bool {
			changed := state.SetUnreadable(err.Error())
			if changed {
				log.Error(err, "the identity boundary's admission policies cannot be read: bindings report BoundaryEnforced Unknown until they can")
			}
			return changed
		},
		unreadableAfter: boundaryUnreadableAfter,
		requeue:         requeue, interval: interval, log: log,
	}
}

// Start implements manager.Runnable: it checks at once, then every
// interval, until ctx ends.
func (m *pollMonitor) Start(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, m.interval, true, func(ctx context.Context) (bool, error) {
		m.check(ctx)
		return false, nil
	})
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("monitor %s: %w", m.what, err)
	}
	return nil
}

// check reads once and, when what it reads changed, records it and
// requeues the affected bindings.
func (m *pollMonitor) check(ctx context.Context) {
	why, err := m.read(ctx)
	if err != nil {
		if msg := err.Error(); msg != m.lastErr {
			m.log.Error(err, "reading "+m.what+"; what was last read stands", "interval", m.interval)
			m.lastErr = msg
		}
		m.failures++
		if m.unreadable == nil || m.failures < m.unreadableAfter || !m.unreadable(err) {
			return
		}
		m.requeuePending = true
	} else {
		m.lastErr, m.failures = "", 0
		if m.record(why) {
			m.requeuePending = true
			m.logChange(why)
		}
	}
	if !m.requeuePending {
		return
	}
	bindings, err := m.affected(ctx)
	if err != nil {
		m.log.Error(err, "requeue the bindings after a change of "+m.what+"; trying again at the next check")
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
