package spire

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count and time SPIRE RPCs.
type Metrics struct {
	rpcs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	results  *prometheus.CounterVec
	dryRuns  *prometheus.CounterVec
}

// NewMetrics creates the SPIRE RPC metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_spire_rpcs_total",
			Help: "SPIRE API calls (Entry and TrustDomain APIs) by method and gRPC code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trustplane_spire_rpc_duration_seconds",
			Help:    "Latency of SPIRE API calls by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_spire_entry_results_total",
			Help: "Per-entry results inside batch calls, by method and code.",
		}, []string{"method", "code"}),
		dryRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trustplane_spire_dry_run_writes_total",
			Help: "Entry and federation relationship writes not made because of --dry-run, by method.",
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.rpcs, m.duration, m.results, m.dryRuns} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register SPIRE metrics: %w", err)
		}
	}
	return m, nil
}

// dryRun counts n writes of method not made; a nil Metrics counts nothing.
func (m *Metrics) dryRun(method string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.dryRuns.WithLabelValues(method).Add(float64(n))
}
