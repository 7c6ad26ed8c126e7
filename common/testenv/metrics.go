package testenv

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricSum returns the sum of the values of the counters and gauges named
// name that g gathers and whose labels hold every pair of labels; a label
// a metric does not carry has the empty value. It returns 0 when none
// matches, as a counter not yet incremented reads, and an error when the
// metrics named name are of another type (a histogram or a summary), whose
// value no sum of counts would tell.
func MetricSum(g prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		if t := f.GetType(); t != dto.MetricType_COUNTER && t != dto.MetricType_GAUGE {
			return 0, fmt.Errorf("metric %s is a %s, not a counter or gauge", name, t)
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum, nil
}
