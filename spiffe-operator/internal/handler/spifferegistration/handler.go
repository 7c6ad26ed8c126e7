package spifferegistration

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/class"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// Kind is the kind name used for ownership and metrics.
const Kind = "SpiffeRegistration"

// maxFailures caps status.failures.
const maxFailures = 5

// maxFailureMessage caps each status.failures[].message: a message may
// quote a value a pod's owner wrote (an annotation of up to 256 KiB), and
// the status of a policy that selects every namespace's pods must stay
// writable whatever one namespace's pods carry.
const maxFailureMessage = 1024

// Handler registers the workloads a SpiffeRegistration selects.
type Handler struct {
	// Reader reads namespaces, normally the informer cache.
	Reader client.Reader
	// Lister yields workloads; nil means a workload.ReaderLister on Reader.
	Lister workload.Lister
	// Syncer writes the entries.
	Syncer *entrysync.Syncer
	// TrustDomain is the SPIRE server's trust domain; empty skips the check.
	TrustDomain string
	// Metrics records entries by policy and state; nil disables it.
	Metrics *entrysync.Metrics
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// Dirty records which workloads changed since a policy's last pass; nil
	// makes every pass a full one. Incremental passes also need Lister to
	// implement workload.Getter.
	Dirty *Dirty
	// ClusterName is the operator's --cluster-name, the {clusterName} of
	// parent ID templates.
	ClusterName string
	// Nodes looks up the nodes that pods run on, for per-node parents.
	Nodes nodes.Getter
	// AllNodes lists the nodes, so that retention can tell which node's
	// agent a per-node parent names; nil keeps an entry no longer wanted
	// for a matching pod on any node.
	AllNodes nodes.Lister
	// ServiceNames returns the DNS names of the Services of a namespace
	// selecting pods with the given labels, for autoPopulateDNSNames; nil
	// means none.
	ServiceNames func(ctx context.Context, namespace string, podLabels map[string]string) ([]string, error)
	// DryRun is true when the Syncer writes nothing (--dry-run): a pass
	// that succeeded reports Ready=False with ReasonDryRun.
	DryRun bool
	// Class says which policies this instance takes; fallback policies
	// yield only to those.
	Class class.Filter
	// Pods reads the pods, for per-node parents, per-pod entries and
	// policies of pods; nil reads typed pods through Reader.
	Pods *pods.Source
	// Passes counts the passes by kind; nil counts nothing.
	Passes *PassMetrics
	// Notify asks for a pass of a policy without blocking: of the fallback
	// policies, when another policy's pass finds workloads it selects but
	// holds no entry for. nil asks for none.
	Notify func(entrysync.Owner)

	memo renders
	// parents remembers the node each per-node parent was rendered for.
	parents renderedParents
}

var (
	_ handler.Handler[*v1alpha1.SpiffeRegistration] = &Handler{}
	_ handler.Forgetter                             = &Handler{}
)

// OwnerOf returns the entry owner that obj stands for.
func OwnerOf(obj *v1alpha1.SpiffeRegistration) entrysync.Owner {
	return entrysync.Owner{Kind: Kind, Name: obj.Name, UID: obj.UID, Created: obj.CreationTimestamp.Time}
}

// ownerFor is OwnerOf with the grants p makes (an entry kept without being
// wanted keeps no other) and, for a policy of per-node parents, the node
// each parent ID names, so that retention keeps an entry no longer wanted
// only for the pods its node's agent can serve. The nodes are read once,
// when retention first asks.
func (h *Handler) ownerFor(obj *v1alpha1.SpiffeRegistration, p *policy) entrysync.Owner {
	o := OwnerOf(obj)
	o.Grants = p.grants()
	if !p.perNode() || h.AllNodes == nil {
		return o
	}
	var (
		byParent  map[string]string
		uidByName map[string]string
		nodesRead bool
	)
	o.NodeOfParent = func(ctx context.Context, parent string) (string, bool, bool) {
		if byParent == nil {
			all, err := h.AllNodes(ctx)
			if err != nil {
				// Not knowing the nodes, judge by pods on any node, for
				// the rest of the pass too: no parent names a known node.
				logf.FromContext(ctx).Error(err, "reading nodes; keeping entries no longer wanted for pods on any node")
				all = nil
			}
			nodesRead = err == nil
			byParent = make(map[string]string, len(all))
			uidByName = make(map[string]string, len(all))
			for _, n := range all {
				uidByName[n.Name] = n.UID
				if id, err := p.nodeParent(n); err == nil {
					byParent[id.String()] = n.Name
				}
			}
		}
		if node, ok := byParent[parent]; ok {
			return node, true, true
		}
		// A parent the policy's template no longer renders for a node:
		// its agent runs on the node it was rendered for, if any. When
		// that node is gone or was re-created under a new UID (or the
		// nodes cannot be read), its agent may still run under this ID
		// until it attests again: the parent is not current. When the
		// node is the same (the template was edited), the agent's ID is
		// what the template now renders.
		node, uid, known := h.parents.incarnationOf(parent)
		return node, known, nodesRead && uid != "" && uidByName[node] == uid
	}
	return o
}

// CreateOrUpdate makes SPIRE hold exactly the entries of the workloads the
// policy selects. A pass for which Dirty recorded only changes of single
// workloads renders and diffs just those (its cost does not grow with the
// number of workloads), and so does a pass that serves events whose
// changes an earlier pass took; any other pass (first, resync, retry, spec
// or namespace change) renders every selected workload and diffs the whole
// set.
func (h *Handler) CreateOrUpdate(ctx context.Context, obj *v1alpha1.SpiffeRegistration) (err error) {
	defer func() {
		if err == nil && h.DryRun {
			err = DryRunError()
		}
	}()
	p, specErr := compile(&obj.Spec, h.TrustDomain, h.ClusterName)
	if specErr != nil {
		// Keep what is registered: a bad edit must not revoke identities.
		h.Dirty.forget(obj.Name)
		return ctrlerrors.WithReason(specErr.reason, ctrlerrors.BlockedErrorf("%w", specErr))
	}
	changed, all, recorded := h.Dirty.take(obj.Name)
	if obj.Spec.Fallback {
		if p.others, err = h.othersOf(ctx, obj); err != nil {
			return err
		}
	}
	if p.pods != nil {
		h.Passes.observe(obj.Name, PassFull, ReasonPodSelector)
		return h.podPass(ctx, obj, p)
	}
	memo := h.memo.forPolicy(obj.UID, obj.Generation, func() map[workloadKey]keptRecord {
		recorded, err := parseKeptEntries(obj.Status.KeptEntries, p.trustDomain)
		if err != nil {
			logf.FromContext(ctx).Error(err, "reading the last good entries the status records; those workloads keep none after this restart")
		}
		h.witness(ctx, OwnerOf(obj), recorded)
		return recorded
	})
	// Whatever the pass ends with, its status must not take lastSyncTime
	// back behind a pass that talked to SPIRE and whose status was held
	// back and replaced, or written off the worker after this pass read
	// the policy.
	defer func() { obj.Status.LastSyncTime = laterSync(obj.Status.LastSyncTime, memo.synced) }()
	reason := fullPassReason(obj, p, memo, passRecords{all: all, recorded: recorded, servesEvents: controller.PassServesEvents(ctx)})
	if reason == "" && h.Syncer.ViewsDue(OwnerOf(obj)) {
		// Every event's pass queues the policy before its resync, so while
		// events keep coming the resync never runs, and a pass that writes
		// nothing reads no view again: what the resync does (read SPIRE
		// again, repair drift) is done here instead.
		reason = ReasonResyncDue
	}
	if reason == "" {
		if reason, err = h.incremental(ctx, obj, p, memo, changed); reason == "" {
			if !recorded {
				reason = ReasonEventsTaken
			}
			h.Passes.observe(obj.Name, PassIncremental, reason)
			return err
		}
	}
	logf.FromContext(ctx).V(1).Info("full pass", "reason", reason)
	h.Passes.observe(obj.Name, PassFull, reason)
	return h.fullPass(ctx, obj, p, memo)
}

// witness marks the records of recorded whose entry SPIRE holds under the
// policy's own ID (keptRecord.registered). A record without a parent (per-
// node parents) or one SPIRE cannot be asked about stays unmarked, and is
// then taken only if the policy could render it now (couldHaveRendered).
func (h *Handler) witness(ctx context.Context, owner entrysync.Owner, recorded map[workloadKey]keptRecord) {
	for k, rec := range recorded {
		if rec.entry.ParentID.IsZero() {
			continue
		}
		ok, err := h.Syncer.Registered(ctx, owner, &rec.entry)
		if err != nil {
			logf.FromContext(ctx).Error(err, "asking SPIRE whether a recorded last good entry is the policy's own; it counts only if the policy could render it now")
			return
		}
		rec.registered = ok
		recorded[k] = rec
	}
}

// passRecords is what a pass found recorded for it, and whether it serves
// events (controller.PassServesEvents).
type passRecords struct {
	// all is true when a full pass was asked for.
	all bool
	// recorded is false when nothing was.
	recorded     bool
	servesEvents bool
}

// fullPassReason says why a pass must render every selected workload, or
// returns "" when an incremental pass may serve it.
func fullPassReason(obj *v1alpha1.SpiffeRegistration, p *policy, memo *policyRenders, r passRecords) string {
	switch {
	case r.all:
		return ReasonAsked
	case !memo.ready:
		return ReasonUnknownState
	case !r.recorded && !r.servesEvents:
		// The resync, a retry or a requeue. A pass that serves events
		// only has nothing recorded when an earlier pass took what they
		// recorded (an event handler records, then queues, and a pass
		// may begin in between): it renders nothing, and reports the
		// status of what the memo holds.
		return ReasonResync
	case obj.Spec.Fallback:
		// A fallback policy depends on every other policy.
		return ReasonFallback
	case p.autoDNS:
		// DNS names from Services depend on every Service.
		return ReasonServiceDNSNames
	}
	return ""
}

// fullPass renders every selected workload and syncs the whole desired set.
func (h *Handler) fullPass(ctx context.Context, obj *v1alpha1.SpiffeRegistration, p *policy, memo *policyRenders) error {
	lister := h.lister()
	var (
		rendered []*entries.Entry
		failures []v1alpha1.Failure
	)
	memo.ready = false
	memo.begin()
	if namespaces := memo.heldRecordNamespaces(); len(namespaces) > 0 {
		// The first pass after a start judges records SPIRE holds against
		// what the template renders now for their namespaces' workloads:
		// a second read of the cache.
		current, err := currentIDsOf(ctx, p, lister, namespaces)
		if err != nil {
			return err
		}
		memo.current = current
	}
	yielded := 0
	var autoErr error
	if p.others != nil {
		p.others.own = &ownEntries{h: h, obj: obj, p: p, memo: memo, wanted: memo.wanted, asked: map[entries.Key]bool{}}
	}
	memo.wanted = nil
	selected, err := workload.Each(ctx, h.Reader, lister, p.selection, func(w workload.Workload) {
		switch c := p.claimOf(w); c {
		case claimHeld:
			memo.carry(p, w)
			yielded++
			return
		case claimUnsure, claimPresumed:
			// The other policy may hold w: the fallback keeps it only if
			// it registered w itself and w renders in no other policy
			// now, and otherwise keeps its render (its last good entry)
			// for a later pass.
			if !p.others.own.keepsItself(ctx, w) || c == claimPresumed && p.rendersElsewhere(w) {
				memo.carry(p, w)
				yielded++
				return
			}
		}
		e, f := memo.render(p, w)
		if f != nil {
			failures = append(failures, *f)
		}
		if e != nil && p.others != nil {
			hw, err := p.sharesPods(ctx, lister, e, w)
			if err != nil {
				autoErr = cmp.Or(autoErr, err)
				return
			}
			if hw != nil {
				failures = append(failures, sharedPodsFailure(w, hw))
				return
			}
		}
		if e != nil && p.autoDNS {
			var err error
			if e, err = h.withServiceNames(ctx, e, w.Namespace, w.MatchLabels); err != nil {
				// Keep the first: a later workload's lookup must not hide it
				// (the pass would leave this workload's entry out).
				autoErr = cmp.Or(autoErr, err)
				return
			}
		}
		if e != nil {
			rendered = append(rendered, e)
		}
	})
	if err != nil {
		return fmt.Errorf("select workloads: %w", err)
	}
	memo.end()
	h.publishFailed(ctx, obj, memo, maps.Keys(memo.byWorkload), refusedOf(p, memo.refused), true)
	if len(memo.dropped) > 0 {
		logf.FromContext(ctx).Error(errors.New("the policy could not have rendered them"),
			"left out last good entries the status records: written by someone other than the operator, or by a template since changed",
			"records", memo.dropped)
		memo.dropped = nil
	}
	if autoErr != nil {
		return autoErr
	}
	selected -= yielded
	bases := merge(rendered)
	want := bases
	var (
		groups      [][]*entries.Entry
		podFailures []v1alpha1.Failure
	)
	if p.byPods() {
		if groups, podFailures, err = h.byPods(ctx, p, bases); err != nil {
			return err
		}
		want = slices.Concat(groups...)
		failures = append(failures, podFailures...)
	}

	owner := h.ownerFor(obj, p)
	out, syncErr := h.Syncer.Sync(ctx, owner, want, entrysync.ParseParents(obj.Status.ParentIDs))
	obj.Status.ParentIDs = out.Parents
	if syncErr == nil && p.others != nil {
		memo.wanted = make(map[entries.Key]struct{}, len(want))
		for _, e := range want {
			memo.wanted[e.Key()] = struct{}{}
		}
	}
	if refused := refusedIn(out.Failed); syncErr == nil && !maps.Equal(refused, memo.refused) {
		memo.refused = refused
		h.publishFailed(ctx, obj, memo, maps.Keys(memo.byWorkload), refusedOf(p, refused), false)
	}
	for _, f := range out.Failed {
		failures = append(failures, v1alpha1.Failure{Object: f.Entry.SpiffeID.String(), Reason: f.Reason, Message: f.Message})
	}
	// Node failures are found only by looking at every node: a pass that
	// has some is followed by full ones until they are fixed.
	if syncErr == nil && !p.autoDNS && len(podFailures) == 0 {
		memo.rebuild(bases, groups, p.byPods(), &out)
	}
	return h.report(ctx, obj, owner, counts{
		selected: selected, desired: len(want), registered: len(out.Registered), masked: len(out.Masked),
		spireFailed: len(out.Failed), retained: out.Retained, talked: out.Talked, synced: &memo.synced,
		kept: memo.keptEntries(maps.Keys(memo.byWorkload), obj.Status.KeptEntries),
	}, failures, syncErr)
}

// counts are the figures a pass reports.
type counts struct {
	selected, desired, registered, masked, spireFailed int
	// retained counts entries no longer wanted that pods still use.
	retained int
	talked   bool
	// synced is the memo's record of when a pass of the policy last
	// talked to SPIRE without error (nil for a pass that keeps no memo);
	// report updates it, and CreateOrUpdate reports it.
	synced *time.Time
	// kept are the last good entries of failing workloads, for the status.
	kept []v1alpha1.KeptEntry
}

// laterSync returns the later of recorded (a status's lastSyncTime) and
// synced (the memo's record; zero when none).
func laterSync(recorded *metav1.Time, synced time.Time) *metav1.Time {
	if !synced.IsZero() && (recorded == nil || recorded.Time.Before(synced)) {
		return &metav1.Time{Time: synced}
	}
	return recorded
}

// report writes the pass's figures into the status and metrics and returns
// the pass's error.
func (h *Handler) report(ctx context.Context, obj *v1alpha1.SpiffeRegistration, owner entrysync.Owner, c counts, failures []v1alpha1.Failure, syncErr error) error {
	// Every field of the status is set here or by the caller (parentIDs),
	// from what the pass knows now.
	controller.StatusComplete(ctx)
	slices.SortFunc(failures, func(a, b v1alpha1.Failure) int { return strings.Compare(a.Object, b.Object) })
	st := &obj.Status
	st.WorkloadsSelected = int32(c.selected)
	st.EntriesDesired = int32(c.desired)
	st.EntriesRegistered = int32(c.registered)
	st.EntriesMasked = int32(c.masked)
	st.EntriesFailed = int32(len(failures))
	for i := range failures {
		failures[i].Message = condition.Cut(failures[i].Message, maxFailureMessage)
	}
	st.Failures = failures[:min(len(failures), maxFailures)]
	if len(st.Failures) == 0 {
		st.Failures = nil
	}
	st.KeptEntries = c.kept
	if c.talked && syncErr == nil {
		t := h.now()
		if c.synced != nil {
			*c.synced = t
		}
		st.LastSyncTime = &metav1.Time{Time: t}
	}
	h.Metrics.Record(owner, c.desired, c.registered, c.masked, len(failures))
	logf.FromContext(ctx).V(1).Info("synced", "workloads", c.selected, "desired", c.desired, "registered", c.registered,
		"masked", c.masked, "failed", len(failures), "retainedForPods", c.retained, "talked", c.talked)

	if syncErr != nil {
		return SpireError(syncErr)
	}
	if len(failures) > 0 {
		f := failures[0]
		reason := f.Reason
		if c.spireFailed > 0 && !strings.HasPrefix(reason, "Invalid") && reason != ReasonUnsafePodSelector && reason != ReasonTooManySelectors && !entrysync.OwnReason(reason) {
			reason = ReasonEntryRejected
		}
		return ctrlerrors.WithReason(reason, ctrlerrors.BlockedErrorf(
			"%d of %d workloads' entries failed; first: %s: %s: %s", len(failures), c.selected, f.Object, f.Reason, f.Message))
	}
	return nil
}

// Delete removes exactly the entries this policy holds, under its parent
// and under every parent its status recorded.
func (h *Handler) Delete(ctx context.Context, obj *v1alpha1.SpiffeRegistration) error {
	owner := OwnerOf(obj)
	if err := h.Syncer.Release(ctx, owner, entrysync.ParseParents(obj.Status.ParentIDs, obj.Spec.ParentID)); err != nil {
		return SpireError(err)
	}
	h.Metrics.Forget(owner)
	h.Passes.forget(obj.Name)
	h.memo.forget(obj.UID)
	h.Dirty.forget(obj.Name)
	return nil
}

// Forget implements handler.Forgetter: a policy gone from the cache
// without its Delete pass (its finalizer removed by hand) gives up its
// claims on entries, so that the next claimant of each is no longer masked
// by it (see entrysync.Syncer.Forget), and what the handler remembers of it.
func (h *Handler) Forget(key k8stypes.NamespacedName) {
	for _, o := range h.Syncer.Forget(Kind, key.Name) {
		h.Metrics.Forget(o)
		h.memo.forget(o.UID)
	}
	h.Passes.forget(key.Name)
	h.Dirty.forget(key.Name)
}

// withServiceNames returns e with the DNS names of the Services of namespace
// that select pods with podLabels added (a copy; e is not modified).
func (h *Handler) withServiceNames(ctx context.Context, e *entries.Entry, namespace string, podLabels map[string]string) (*entries.Entry, error) {
	if h.ServiceNames == nil || len(podLabels) == 0 {
		return e, nil
	}
	names, err := h.ServiceNames(ctx, namespace, podLabels)
	if err != nil || len(names) == 0 {
		return e, err
	}
	c := *e
	c.DNSNames = append(slices.Clone(e.DNSNames), names...)
	c.Normalize()
	return &c, nil
}

// podSource returns where the handler reads pods.
func (h *Handler) podSource() pods.Source {
	if h.Pods != nil {
		return *h.Pods
	}
	return pods.Source{Reader: h.Reader}
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// SpireError maps a Syncer error to a retryable error with the reason a
// user can act on.
func SpireError(err error) error {
	switch {
	case errors.Is(err, entrysync.ErrUnsettled):
		// Settle asks for the object's pass: no requeue of its own.
		return ctrlerrors.WithReason(ReasonWaitingForFirstPasses, ctrlerrors.BlockedErrorf("%w", err))
	case errors.Is(err, entrysync.ErrStale):
		return ctrlerrors.WithReason(ReasonSpireChanged, ctrlerrors.RetryableErrorf("%w", err))
	case status.Code(err) == codes.InvalidArgument:
		return ctrlerrors.WithReason(ReasonEntryRejected, ctrlerrors.BlockedErrorf("SPIRE refused the request: %w", err))
	case status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated:
		return ctrlerrors.WithReason(ReasonSpirePermissionDenied, ctrlerrors.RetryableErrorf("SPIRE: %w", err))
	case errors.Is(err, entrysync.ErrDeleteRefused) && status.Code(err) == codes.Unknown:
		return ctrlerrors.WithReason(ReasonSpireRefusedDeletes, ctrlerrors.RetryableErrorf("SPIRE: %w", err))
	case errors.Is(err, entrysync.ErrTransient) && status.Code(err) == codes.Unknown:
		// Every call was answered (a failed call carries its gRPC status):
		// SPIRE is there, and failed the entries the error names.
		return ctrlerrors.WithReason(ReasonSpireFailedEntries, ctrlerrors.RetryableErrorf("SPIRE: %w", err))
	}
	return ctrlerrors.WithReason(ReasonSpireUnavailable, ctrlerrors.RetryableErrorf("SPIRE: %w", err))
}
