package spifferegistration

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Pass kinds and their reasons, the labels of
// trustplane_registration_passes_total: an incremental pass has none but
// ReasonEventsTaken, a full pass always one.
const (
	// PassIncremental renders and diffs only the workloads and service
	// accounts recorded as changed.
	PassIncremental = "incremental"
	// PassFull renders every selected workload and diffs the whole set.
	PassFull = "full"

	// ReasonEventsTaken: an incremental pass that found nothing recorded,
	// as it serves events whose changes an earlier pass took (or an edit of
	// the policy outside its spec); it renders nothing.
	ReasonEventsTaken = "eventsTaken"

	// ReasonAsked: an event that can concern any workload asked for a full
	// pass (a namespace, a node, a Service, another policy, a federation, an
	// entry won or lost to another owner, a list of policies that failed).
	ReasonAsked = "asked"
	// ReasonResync: nothing was recorded and the pass serves no event: the
	// periodic resync, a retry, or a requeue (after a pass that failed,
	// ReasonUnknownState instead).
	ReasonResync = "resync"
	// ReasonResyncDue: the view of a parent under which the policy holds
	// entries is due for a re-read (older than the resync interval, or
	// invalid) while events keep queueing the policy before its resync.
	ReasonResyncDue = "resyncDue"
	// ReasonUnknownState: the handler does not know what SPIRE holds for the
	// policy: its first pass at this generation, or the pass after one that
	// failed or held entries back.
	ReasonUnknownState = "unknownState"
	// ReasonFallback: a fallback policy depends on every other policy.
	ReasonFallback = "fallback"
	// ReasonServiceDNSNames: DNS names from Services depend on every Service.
	ReasonServiceDNSNames = "serviceDNSNames"
	// ReasonPodSelector: a policy of pods renders every pod it selects.
	ReasonPodSelector = "podSelector"
	// ReasonViewDue: the entry syncer cannot serve a change from its view
	// of SPIRE (a parent's view is missing or due for its resync).
	ReasonViewDue = "viewDue"
	// ReasonNodeParent: a node's parent ID failed to render; only a full
	// pass reports it.
	ReasonNodeParent = "nodeParent"
	// ReasonNoGetter: the Handler's workload lister cannot read one
	// workload (it is no workload.Getter).
	ReasonNoGetter = "noGetter"
)

// PassMetrics counts the passes of each policy by kind and, for full
// passes, by reason; a nil PassMetrics counts nothing.
type PassMetrics struct {
	passes *prometheus.CounterVec
}

// NewPassMetrics creates the counter and registers it with reg.
func NewPassMetrics(reg prometheus.Registerer) (*PassMetrics, error) {
	m := &PassMetrics{passes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trustplane_registration_passes_total",
		Help: "Passes of each SpiffeRegistration (name) by kind (full: every selected workload rendered; " +
			"incremental: only those that changed) and, for full passes, the reason.",
	}, []string{"name", "kind", "reason"})}
	if err := reg.Register(m.passes); err != nil {
		return nil, fmt.Errorf("register pass metrics: %w", err)
	}
	return m, nil
}

func (m *PassMetrics) observe(policy, kind, reason string) {
	if m == nil {
		return
	}
	m.passes.WithLabelValues(policy, kind, reason).Inc()
}

// forget removes the counts of policy.
func (m *PassMetrics) forget(policy string) {
	if m == nil {
		return
	}
	m.passes.DeletePartialMatch(prometheus.Labels{"name": policy})
}
