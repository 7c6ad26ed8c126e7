package entrysync

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Entry states of trustplane_spire_entries.
const (
	StateDesired    = "desired"
	StateRegistered = "registered"
	StateMasked     = "masked"
	StateFailed     = "failed"
)

// Metrics is the gauge of entries by owner and state.
type Metrics struct {
	entries *prometheus.GaugeVec
}

// NewMetrics creates the gauge and registers it with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "trustplane_spire_entries",
		Help: "SPIRE entries by owning object (kind, name) and state (desired, registered, masked, failed).",
	}, []string{"kind", "name", "state"})}
	if err := reg.Register(m.entries); err != nil {
		return nil, fmt.Errorf("register entry metrics: %w", err)
	}
	return m, nil
}

// Record sets the gauge for owner.
func (m *Metrics) Record(o Owner, desired, registered, masked, failed int) {
	if m == nil {
		return
	}
	m.entries.WithLabelValues(o.Kind, o.Name, StateDesired).Set(float64(desired))
	m.entries.WithLabelValues(o.Kind, o.Name, StateRegistered).Set(float64(registered))
	m.entries.WithLabelValues(o.Kind, o.Name, StateMasked).Set(float64(masked))
	m.entries.WithLabelValues(o.Kind, o.Name, StateFailed).Set(float64(failed))
}

// Forget removes owner from the gauge.
func (m *Metrics) Forget(o Owner) {
	if m == nil {
		return
	}
	for _, s := range []string{StateDesired, StateRegistered, StateMasked, StateFailed} {
		m.entries.DeleteLabelValues(o.Kind, o.Name, s)
	}
}
