package controller

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// Results of a reconcile pass, as logged ("result"). controller-runtime's
// controller_runtime_reconcile_total counts passes by its own results
// (success, error, requeue, requeue_after); ResultBlocked is counted by
// trustplane_reconcile_blocked_total.
const (
	ResultSuccess   = "success"
	ResultBlocked   = "blocked"
	ResultRetryable = "retryable"
	ResultError     = "error"
	ResultDeleted   = "deleted"
)

// Metrics are the framework's Prometheus metrics, shared by every controller
// of a process (create one with NewMetrics and pass it to each Controller).
// They hold only what controller-runtime does not export already: passes
// that ended Blocked, objects by Ready status, and status writes left
// running off the worker (whose pass controller-runtime counted when it
// returned). Reconcile counts, errors and
// durations are controller-runtime's controller_runtime_reconcile_total,
// controller_runtime_reconcile_errors_total and
// controller_runtime_reconcile_time_seconds, labelled with the same
// controller name.
type Metrics struct {
	blocked *prometheus.CounterVec
	objects *prometheus.GaugeVec
	behind  *prometheus.CounterVec

	mu    sync.Mutex
	ready map[string]map[types.NamespacedName]string
}

// NewMetrics creates the metrics and registers them with reg (use
// sigs.k8s.io/controller-runtime/pkg/metrics.Registry in an operator, a fresh
// prometheus.NewRegistry() in tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		blocked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_reconcile_blocked_total",
			Help: "Reconciles that ended Blocked (waiting on a change outside the object), by controller.",
		}, []string{"controller"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustplane_objects",
			Help: "Objects by controller and Ready status (True, False, Unknown).",
		}, []string{"controller", "ready"}),
		behind: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_status_writes_behind_total",
			Help: "Status writes left running off the worker, by controller and result (written, conflict, failed).",
		}, []string{"controller", "result"}),
		ready: map[string]map[types.NamespacedName]string{},
	}
	for _, c := range []prometheus.Collector{m.blocked, m.objects, m.behind} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts a pass that ended with result.
func (m *Metrics) observe(controller, result string) {
	if m == nil || result != ResultBlocked {
		return
	}
	m.blocked.WithLabelValues(controller).Inc()
}

// addController starts the series of controller at zero, so that a
// controller that never wrote a status off the worker shows it.
func (m *Metrics) addController(controller string) {
	if m == nil {
		return
	}
	for _, result := range []string{behindWritten, behindConflict, behindFailed} {
		m.behind.WithLabelValues(controller, result)
	}
}

// observeBehind counts a status write off the worker that ended with
// result (behindWritten, behindConflict, behindFailed).
func (m *Metrics) observeBehind(controller, result string) {
	if m == nil {
		return
	}
	m.behind.WithLabelValues(controller, result).Inc()
}

// setReady records the Ready status of one object; "" forgets the object.
func (m *Metrics) setReady(controller string, key types.NamespacedName, status string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := m.ready[controller]
	if byKey == nil {
		byKey = map[types.NamespacedName]string{}
		m.ready[controller] = byKey
	}
	if old, ok := byKey[key]; ok {
		m.objects.WithLabelValues(controller, old).Dec()
	}
	if status == "" {
		delete(byKey, key)
		return
	}
	byKey[key] = status
	m.objects.WithLabelValues(controller, status).Inc()
}
