package testsupport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustplane/trustplane/common/testenv"
)

// Reconciles sums controller-runtime's controller_runtime_reconcile_total of
// the controller named controller, over every result, from g (in an operator
// process: sigs.k8s.io/controller-runtime/pkg/metrics.Registry).
func Reconciles(g prometheus.Gatherer, controller string) (float64, error) {
	return testenv.MetricSum(g, "controller_runtime_reconcile_total", map[string]string{"controller": controller})
}
