package spifferegistration

import (
	"fmt"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestAnIncrementalPassJudgesOnlyFailingWorkloadsForTheFallbacks: a
// non-fallback policy of 10,000 workloads that render, one of whose
// entries SPIRE refuses. An incremental pass costs what changed; the
// failed set it publishes for the fallback policies must not cost every
// workload of the policy. A first version walked them all while SPIRE
// refused any entry (seen failing).
func TestAnIncrementalPassJudgesOnlyFailingWorkloadsForTheFallbacks(t *testing.T) {
	const n = 10000
	m := &policyRenders{byWorkload: map[workloadKey]*rendered{}, keys: map[entries.Key]*keyState{},
		spireFailed: map[entries.Key]struct{}{}, refused: map[entries.Key]struct{}{}}
	for i := range n {
		e := entries.Entry{
			SpiffeID:  spiffeid.RequireFromString(fmt.Sprintf("spiffe://example.org/a/w%d", i)),
			ParentID:  spiffeid.RequireFromString("spiffe://example.org/agent"),
			Selectors: []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: fmt.Sprintf("pod-label:app:w%d", i)}},
		}
		e.Normalize()
		k := workloadKey{kind: v1alpha1.WorkloadKind("Deployment"), namespace: "a", name: fmt.Sprintf("w%d", i)}
		r := &rendered{wk: k, entry: e, resourceVersion: "1"}
		m.byWorkload[k] = r
		m.keys[e.Key()] = &keyState{want: &r.entry, members: []*rendered{r}}
		if i == 0 {
			m.spireFailed[e.Key()] = struct{}{}
			m.refused[e.Key()] = struct{}{}
		}
	}
	judged := 0
	for range m.mayHaveFailed() {
		judged++
	}
	failed := m.failedOf(m.mayHaveFailed(), m.refused)
	if len(failed) != 1 {
		t.Fatalf("failed set = %d workloads, want 1", len(failed))
	}
	if limit := len(m.renderFailed) + len(m.spireFailed); judged > limit {
		t.Errorf("an incremental pass judges %d workloads for the fallback's failed set while SPIRE refuses %d entry and %d renders fail: its cost is O(workloads), not O(changed)",
			judged, len(m.spireFailed), len(m.renderFailed))
	}
}
