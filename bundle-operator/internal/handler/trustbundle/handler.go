package trustbundle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
)

// Handler reconciles TrustBundles.
type Handler struct {
	// Sources reads and validates the sources.
	Sources *source.Resolver
	// Objects writes the ConfigMap and Secret targets.
	Objects *target.Objects
	// Injector writes the caBundle of annotated webhooks, APIServices and CRDs.
	Injector *target.Injector
	// ClusterTrustBundles writes the ClusterTrustBundle targets; nil when
	// the operator runs without --cluster-trust-bundles.
	ClusterTrustBundles *target.ClusterTrustBundles
	// Namespaces lists namespaces (metadata, from the cache).
	Namespaces client.Reader
	// SecretTargets permits Secret targets. Without it the operator holds
	// no rights on Secrets and does not watch them: a TrustBundle with a
	// Secret target fails that kind (SecretTargetsDisabled) and Secrets
	// are never released.
	SecretTargets bool
	// Recorder emits an event when targets get the last good bundle while
	// the sources fail; nil disables it.
	Recorder events.EventRecorder
	// Now returns the current time; nil means time.Now.
	Now func() time.Time

	// published remembers the CAs this process published, by TrustBundle.
	published publishedMemory
}

var _ handler.Handler[*v1alpha1.TrustBundle] = &Handler{}

// CreateOrUpdate builds the bundle from the sources and distributes it.
func (h *Handler) CreateOrUpdate(ctx context.Context, tb *v1alpha1.TrustBundle) error {
	log := logf.FromContext(ctx)
	now := h.now()

	// The first pass of tb in this process takes its status as published:
	// later passes are held to it, whoever writes the status meanwhile.
	h.published.adopt(tb.UID, &tb.Status)

	// 1. Sources: any violation stops here. Existing targets are not
	// touched; targets that do not exist yet get the last good bundle.
	res, err := h.Sources.Resolve(ctx, &tb.Spec)
	if err != nil {
		return h.sourceFailed(ctx, tb, err, now)
	}
	condition.SetStatus(tb, TypeSourcesValid, true, ReasonValid, fmt.Sprintf("%d sources valid", len(tb.Spec.Sources)))

	// 2. Merge (dedupe and sort), drop expired, retain removed CAs. The
	// trust domains read from SPIRE stay apart, each its own document.
	c := &content{all: bundle.New(res.Certificates, nil), local: res.Local, federated: res.Federated}
	if tb.Spec.Options.DropExpired {
		c = c.dropExpired(now)
	}
	var grace time.Duration
	if tb.Spec.Options.RetainRemovedFor != nil {
		grace = tb.Spec.Options.RetainRemovedFor.Duration
	}
	fromStatus := neverRetained(&tb.Status, res.Local != nil, source.IsPublicRoot)
	never := func(sha string) bool { return fromStatus(sha) || h.published.neverRetained(tb.UID, sha) }
	var certs []v1alpha1.PublishedCertificate
	c.all, certs = retain(c.all, h.published.vouched(tb.UID, tb.Status.Certificates), never, grace, tb.Spec.Options.DropExpired, now)

	// 3. Render every format once.
	f := newFormats(c)
	rec, err := recordFormats(c)
	if err != nil {
		return fmt.Errorf("record bundle: %w", err)
	}
	markOrigins(certs, tb.Status.Certificates, rec, source.IsPublicRoot)

	// Nothing is written that Kubernetes would refuse: a target or a status
	// over its size limit fails here, before any write, so every target
	// keeps its last good bundle.
	if err := checkSizes(tb, f); err != nil {
		return err
	}
	if certs, err = fitStatus(tb, certs, rec); err != nil {
		return err
	}
	// Only a bundle the pass goes on to record is remembered as published:
	// after a pass that failed before, the status still records the last
	// good bundle, and new targets get it while the sources fail.
	h.published.record(tb.UID, certs, rec)

	// 4. Record the bundle.
	b := c.all
	if fp := b.Fingerprint(); fp != tb.Status.Fingerprint {
		log.Info("bundle changed", "fingerprint", fp, "previous", tb.Status.Fingerprint, "cas", b.Len())
		t := metav1.NewTime(now)
		tb.Status.LastChangeTime = &t
		tb.Status.Fingerprint = fp
	}
	tb.Status.CACount = int32(b.Len())
	tb.Status.PublicRoots = ""
	for _, src := range tb.Spec.Sources {
		if src.PublicRoots != nil {
			tb.Status.PublicRoots = source.PublicRootsVersion
		}
	}
	expiry := metav1.NewTime(b.EarliestExpiry())
	tb.Status.EarliestExpiry = &expiry
	tb.Status.Certificates = certs
	tb.Status.Formats = rec

	// 5. Distribute.
	rep, err := h.sync(ctx, tb, f)
	if err != nil {
		return err
	}
	return targetsResult(tb, rep)
}

// sync writes every target of tb.
func (h *Handler) sync(ctx context.Context, tb *v1alpha1.TrustBundle, f *formats) (target.Report, error) {
	var rep target.Report
	t := tb.Spec.Target
	var namespaces []string
	if t.ConfigMap != nil || t.Secret != nil {
		var err error
		if namespaces, err = selectedNamespaces(ctx, h.Namespaces, t.NamespaceSelector); err != nil {
			return rep, err
		}
	}
	objLabels := targetLabels(ctx, tb)
	for _, o := range h.objectTargets(&t) {
		if o.disabled != nil {
			rep.Fail(fmt.Sprintf("%s targets", o.kind), o.disabled)
			continue
		}
		if o.spec == nil {
			rep.Add(h.Objects.ReleaseAll(ctx, o.kind, objLabels))
			continue
		}
		data, err := f.data(o.spec.Keys)
		if err != nil {
			// Only this kind fails; the other kind and injection go on.
			rep.Fail(fmt.Sprintf("%s targets", o.kind), err)
			continue
		}
		rep.Add(h.Objects.Sync(ctx, target.Desired{
			Bundle: tb.Name, Kind: o.kind, Name: o.spec.Name,
			Namespaces: namespaces, Data: data, Binary: binaryKeys(o.spec.Keys), Labels: objLabels,
		}))
	}
	rep.Add(h.syncClusterTrustBundle(ctx, tb, f.pem, objLabels))
	rep.Add(h.Injector.Sync(ctx, tb.Name, f.pem))
	h.warnSkipped(tb, rep.Skipped)
	h.warnLeft(tb, rep.Left)
	if rep.Written > 0 {
		logf.FromContext(ctx).Info("targets written", "written", rep.Written, "inSync", rep.InSync, "failed", rep.FailedCount)
	}
	return rep, nil
}

// syncClusterTrustBundle writes the ClusterTrustBundle target of tb (and
// releases any other of ours), or reports that the operator cannot.
func (h *Handler) syncClusterTrustBundle(ctx context.Context, tb *v1alpha1.TrustBundle, pem []byte, objLabels map[string]string) target.Report {
	var rep target.Report
	t := tb.Spec.Target.ClusterTrustBundle
	if h.ClusterTrustBundles == nil {
		if t != nil {
			rep.Fail("ClusterTrustBundle target", errClusterTrustBundlesDisabled)
		}
		return rep
	}
	name := ""
	if t != nil {
		name = t.Name
	}
	return h.ClusterTrustBundles.Sync(ctx, name, pem, objLabels)
}

// errClusterTrustBundlesDisabled: a ClusterTrustBundle target while the
// operator runs without --cluster-trust-bundles.
var errClusterTrustBundlesDisabled = ctrlerrors.WithReason(ReasonClusterTrustBundlesDisabled,
	ctrlerrors.BlockedErrorf("start the operator with --cluster-trust-bundles to write ClusterTrustBundles"))

// warnSkipped emits a Warning event naming the annotated objects that
// cannot take a caBundle: an annotation mistake is not a failed pass.
func (h *Handler) warnSkipped(tb *v1alpha1.TrustBundle, skipped []string) {
	if len(skipped) == 0 || h.Recorder == nil {
		return
	}
	h.Recorder.Eventf(tb, nil, corev1.EventTypeWarning, ReasonInjectionSkipped, "Inject",
		"%d annotated objects cannot take a caBundle and are skipped: %s", len(skipped), strings.Join(skipped, "; "))
}

// warnLeft emits a Warning event naming the targets a release left in
// place (see target.Report.Left).
func (h *Handler) warnLeft(tb *v1alpha1.TrustBundle, left []string) {
	if len(left) == 0 || h.Recorder == nil {
		return
	}
	h.Recorder.Eventf(tb, nil, corev1.EventTypeWarning, ReasonTargetsLeftInPlace, "Release",
		"%d targets to release are left as they are: %s", len(left), strings.Join(left, "; "))
}

// Delete takes our keys out of every ConfigMap and Secret target (deleting
// the objects only we wrote). Injected caBundles stay: removing them would
// break the webhooks and APIServices that still rely on them. Targets the
// API server refuses without our keys (made immutable by another writer)
// are left as they are, with a Warning event: they do not hold up the
// deletion.
func (h *Handler) Delete(ctx context.Context, tb *v1alpha1.TrustBundle) error {
	h.published.forget(tb.UID)
	var rep target.Report
	objLabels := targetLabels(ctx, tb)
	for _, o := range h.objectTargets(&v1alpha1.Target{}) {
		rep.Add(h.Objects.ReleaseAll(ctx, o.kind, objLabels))
	}
	if h.ClusterTrustBundles != nil {
		rep.Add(h.ClusterTrustBundles.Sync(ctx, "", nil, objLabels))
	}
	h.warnLeft(tb, rep.Left)
	if rep.FailedCount > 0 {
		return ctrlerrors.WithReason(ReasonTargetsFailed,
			ctrlerrors.RetryableErrorf("release %d targets: %s", rep.FailedCount, strings.Join(rep.Failed, "; ")))
	}
	return nil
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// sourceFailed records a failed source, gives targets that do not exist yet
// the last good bundle, and maps the failure to the framework's errors:
// content a user must fix blocks; an API that did not answer retries.
func (h *Handler) sourceFailed(ctx context.Context, tb *v1alpha1.TrustBundle, err error, now time.Time) error {
	reason := source.ReasonReadFailed
	transient := true
	var se *source.Error
	if errors.As(err, &se) {
		reason, transient = se.Reason, se.Transient
	}
	var (
		note string
		rep  target.Report
	)
	if reason == source.ReasonTrustDomainMismatch {
		// The spec names another trust domain than SPIRE's: nothing is
		// written until one of them is corrected.
		note = "nothing is written"
	} else {
		note, rep = h.fillNew(ctx, tb, now)
	}
	msg := fmt.Sprintf("%v; %s", err, note)
	condition.SetStatus(tb, TypeSourcesValid, false, reason, msg)
	if rep.Written > 0 {
		logf.FromContext(ctx).Info("new targets given the last good bundle while the sources fail",
			"created", rep.Written, "fingerprint", tb.Status.Fingerprint, "reason", reason)
		if h.Recorder != nil {
			h.Recorder.Eventf(tb, nil, corev1.EventTypeNormal, ReasonLastGoodBundle, "CreateTargets",
				"%d new targets were given the last good bundle %s while the sources fail (%s)",
				rep.Written, tb.Status.Fingerprint, reason)
		}
	}
	if rep.FailedCount > 0 {
		// The new targets need a quick retry even when the source needs a fix.
		return ctrlerrors.WithReason(reason, ctrlerrors.RetryableErrorf("%s; %d new targets failed: %s",
			msg, rep.FailedCount, strings.Join(rep.Failed, "; ")))
	}
	if transient {
		return ctrlerrors.WithReason(reason, ctrlerrors.RetryableErrorf("%s", msg))
	}
	return ctrlerrors.WithReason(reason, ctrlerrors.BlockedErrorf("%s", msg))
}

// fillNew runs while the sources fail. It never changes an existing target:
// it only creates the ConfigMap and Secret targets that do not exist yet
// (namespaces that started matching) and injects into annotated objects
// whose caBundle fields hold nothing else, giving them the last good bundle
// rebuilt from the status (see lastGood), never anything derived from the
// sources. Without a last good bundle it writes nothing. It returns what
// the conditions tell the user (stable while the failure lasts, so passes
// do not rewrite the status) and the report of the writes.
func (h *Handler) fillNew(ctx context.Context, tb *v1alpha1.TrustBundle, now time.Time) (string, target.Report) {
	var rep target.Report
	if !h.published.vouchesFor(tb.UID, tb.Status.Certificates, tb.Status.Formats) {
		// Whoever may write the status (the operator's own token) could
		// record a bundle of their own for new targets to get.
		return "targets keep their last good bundle; new targets get none: the status records certificates this operator did not publish", rep
	}
	f, err := lastGood(&tb.Status, now)
	switch {
	case errors.Is(err, errNeverPublished):
		return "no bundle was published yet, so no target is written", rep
	case err != nil:
		return fmt.Sprintf("targets keep their last good bundle; new targets get none: %v", err), rep
	}
	notes := []string{fmt.Sprintf("targets keep their last good bundle %s and new targets get it", tb.Status.Fingerprint)}
	r, why := h.fillObjects(ctx, tb, f)
	rep.Add(r)
	notes = append(notes, why...)
	if t := tb.Spec.Target.ClusterTrustBundle; t != nil && h.ClusterTrustBundles != nil {
		rep.Add(h.ClusterTrustBundles.Fill(ctx, t.Name, f.pem, targetLabels(ctx, tb)))
	}
	rep.Add(h.Injector.Fill(ctx, tb.Name, f.pem))
	return strings.Join(notes, "; "), rep
}

// fillObjects creates the ConfigMap and Secret targets of tb that do not
// exist yet with the formats f, and says why a kind got none.
func (h *Handler) fillObjects(ctx context.Context, tb *v1alpha1.TrustBundle, f *formats) (target.Report, []string) {
	var rep target.Report
	t := tb.Spec.Target
	if t.ConfigMap == nil && t.Secret == nil {
		return rep, nil
	}
	namespaces, err := selectedNamespaces(ctx, h.Namespaces, t.NamespaceSelector)
	if err != nil {
		return rep, []string{fmt.Sprintf("new ConfigMap and Secret targets get none: %v", err)}
	}
	var why []string
	objLabels := targetLabels(ctx, tb)
	for _, o := range h.objectTargets(&t) {
		if o.spec == nil || o.disabled != nil {
			continue
		}
		data, err := f.data(o.spec.Keys)
		if err != nil {
			why = append(why, fmt.Sprintf("new %s targets get none: %v", o.kind, err))
			continue
		}
		r, err := h.Objects.Fill(ctx, target.Desired{
			Bundle: tb.Name, Kind: o.kind, Name: o.spec.Name,
			Namespaces: namespaces, Data: data, Binary: binaryKeys(o.spec.Keys), Labels: objLabels,
		})
		rep.Add(r)
		if err != nil {
			why = append(why, fmt.Sprintf("new %s targets get none: %v", o.kind, err))
		}
	}
	return rep, why
}

// targetsResult records the target counts and fails the pass when a target
// could not be written, so it is retried.
func targetsResult(tb *v1alpha1.TrustBundle, rep target.Report) error {
	tb.Status.TargetsInSync = int32(rep.InSync)
	tb.Status.TargetsFailed = int32(rep.FailedCount)
	tb.Status.FailedTargets = rep.Failed
	if rep.FailedCount > 0 {
		msg := fmt.Sprintf("%d targets failed: %s", rep.FailedCount, strings.Join(rep.Failed, "; "))
		condition.SetStatus(tb, TypeTargetsInSync, false, ReasonTargetsFailed, msg)
		return ctrlerrors.WithReason(ReasonTargetsFailed, ctrlerrors.RetryableErrorf("%s", msg))
	}
	condition.SetStatus(tb, TypeTargetsInSync, true, ReasonInSync, fmt.Sprintf("%d targets hold the bundle", rep.InSync))
	return nil
}

// targetLabels are the labels of every ConfigMap and Secret target: the
// environment, our cache-selecting label and the owner labels (no owner
// reference: garbage collection would delete others' keys of a shared object).
func targetLabels(ctx context.Context, tb *v1alpha1.TrustBundle) map[string]string {
	env, _ := scoped.EnvironmentOf(tb, "")
	if j := janitor.FromContext(ctx); j != nil {
		env = j.Environment()
	}
	l := labels.Owner(tb, "TrustBundle")
	l[labels.Environment] = env
	l[target.LabelTrustBundle] = tb.Name
	return l
}

// objectTarget is one per-namespace target kind of a TrustBundle and its
// spec (nil when the TrustBundle does not ask for that kind).
type objectTarget struct {
	kind target.Kind
	spec *v1alpha1.ObjectTarget
	// disabled is why the operator cannot write the requested kind.
	disabled error
}

// objectTargets lists the per-namespace target kinds of t the operator
// handles, ConfigMap first; Secrets only with SecretTargets (a Secret
// target asked for without it is listed with the reason).
func (h *Handler) objectTargets(t *v1alpha1.Target) []objectTarget {
	out := []objectTarget{{kind: target.KindConfigMap, spec: t.ConfigMap}}
	switch {
	case h.SecretTargets:
		out = append(out, objectTarget{kind: target.KindSecret, spec: t.Secret})
	case t.Secret != nil:
		out = append(out, objectTarget{kind: target.KindSecret, spec: t.Secret, disabled: ctrlerrors.WithReason(ReasonSecretTargetsDisabled,
			ctrlerrors.BlockedErrorf("start the operator with --allow-secret-targets and the rights of config/components/secrets to write Secrets"))})
	}
	return out
}
