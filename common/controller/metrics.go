package controller

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// Result labels of trustplane_reconcile_total.
const (
	ResultSuccess   = "success"
	ResultBlocked   = "blocked"
	ResultRetryable = "retryable"
	ResultError     = "error"
	ResultDeleted   = "deleted"
)

// Metrics are the framework's Prometheus metrics, shared by every controller
// of a process (create one with NewMetrics and pass it to each Controller).
type Metrics struct {
	reconciles *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	objects    *prometheus.GaugeVec

	mu    sync.Mutex
	ready map[string]map[types.NamespacedName]string
}

// NewMetrics creates the metrics and registers them with reg (use
// sigs.k8s.io/controller-runtime/pkg/metrics.Registry in an operator, a fresh
// prometheus.NewRegistry() in tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_reconcile_total",
			Help: "Reconciles by controller and result (success, blocked, retryable, error, deleted).",
		}, []string{"controller", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustplane_reconcile_duration_seconds",
			Help:    "Duration of reconciles by controller.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"controller"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "trustplane_objects",
			Help: "Objects by controller and Ready status (True, False, Unknown).",
		}, []string{"controller", "ready"}),
		ready: map[string]map[types.NamespacedName]string{},
	}
	for _, c := range []prometheus.Collector{m.reconciles, m.duration, m.objects} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) observe(controller, result string, seconds float64) {
	if m == nil {
		return
	}
	m.reconciles.WithLabelValues(controller, result).Inc()
	m.duration.WithLabelValues(controller).Observe(seconds)
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
