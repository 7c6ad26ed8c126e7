package testsupport

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Reconciles sums controller-runtime's controller_runtime_reconcile_total of
// the controller named controller, over every result, from g (in an operator
// process: sigs.k8s.io/controller-runtime/pkg/metrics.Registry).
func Reconciles(g prometheus.Gatherer, controller string) (float64, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n, nil
}
