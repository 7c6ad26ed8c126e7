package testenv_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/trustplane/trustplane/common/testenv"
)

// TestMetricSumAddsTheMetricsWhoseLabelsMatch checks MetricSum against
// sums worked out by hand over a registry of known counters and gauges.
func TestMetricSumAddsTheMetricsWhoseLabelsMatch(t *testing.T) {
	reg := prometheus.NewRegistry()
	passes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "passes_total"}, []string{"name", "reason"})
	objects := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "objects"}, []string{"ready"})
	reg.MustRegister(passes, objects)
	passes.WithLabelValues("a", "").Add(2)
	passes.WithLabelValues("a", "resync").Add(3)
	passes.WithLabelValues("b", "resync").Add(5)
	objects.WithLabelValues("True").Set(7)
	objects.WithLabelValues("False").Set(11)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"passes_total", map[string]string{"name": "a", "reason": ""}, 2},
		{"passes_total", map[string]string{"name": "a", "reason": "resync"}, 3},
		{"passes_total", map[string]string{"name": "a"}, 5},
		{"passes_total", map[string]string{"reason": "resync"}, 8},
		{"passes_total", nil, 10},
		{"passes_total", map[string]string{"name": "c"}, 0},
		{"passes_total", map[string]string{"absent": "x"}, 0},
		{"passes_total", map[string]string{"absent": ""}, 10},
		{"objects", map[string]string{"ready": "False"}, 11},
		{"objects", nil, 18},
		{"missing", nil, 0},
	} {
		got, err := testenv.MetricSum(reg, c.name, c.labels)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("MetricSum(%s, %v) = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func TestMetricSumRefusesAHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pass_seconds"})
	reg.MustRegister(h)
	h.Observe(1)
	if _, err := testenv.MetricSum(reg, "pass_seconds", nil); err == nil || !strings.Contains(err.Error(), "HISTOGRAM") {
		t.Fatalf("error %v, want one that names the histogram", err)
	}
}

// failingGatherer fails every Gather.
type failingGatherer struct{}

var errGather = errors.New("gather failed")

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) { return nil, errGather }

func TestMetricSumReportsAFailedGather(t *testing.T) {
	if _, err := testenv.MetricSum(failingGatherer{}, "x", nil); !errors.Is(err, errGather) {
		t.Fatalf("error %v, want one wrapping %v", err, errGather)
	}
}
