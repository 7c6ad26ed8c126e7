package identitybinding

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/access"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/janitor"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// blockedOutputError is an output the API would reject, which cannot be
// written until a user acts. An object in the way of an output is the
// janitor's NotOwnedError: never adopted, changed or deleted.
type blockedOutputError struct{ msg string }

// Error implements error.
func (e *blockedOutputError) Error() string { return e.msg }

// peerOutputPending returns the name of an output of another binding that
// selects the same workloads as d (same group and variant) or carries the
// same SPIFFE ID, or "". A binding that has just left a conflict waits for
// such outputs to be withdrawn before it writes its own. Outputs of every
// environment count, so the list goes through the unscoped client.
func (h *Handler) peerOutputPending(ctx context.Context, j *janitor.Client, d output.Desired) (string, error) {
	for _, k := range h.opts.ServedOutputs {
		for _, sel := range []client.MatchingLabels{
			{index.LabelGroup: index.GroupKey(d.Namespace, d.ServiceAccount, d.Variant)},
			{index.LabelSPIFFEID: index.IDKey(d.SPIFFEID)},
		} {
			l := output.NewList(k)
			if err := h.client.List(ctx, l, sel); err != nil {
				return "", fmt.Errorf("list %s outputs of peers: %w", k, err)
			}
			for _, o := range output.Items(l) {
				if !j.Owns(o) {
					return o.GetName(), nil
				}
			}
		}
	}
	return "", nil
}

// holdsStaleOutput reports whether b holds an output of a served kind
// whose group or SPIFFE ID label is not d's: one rendered from an earlier
// spec of b. Every served kind counts, as for peerOutputPending: one the
// instance wrote before its outputs were configured otherwise stands in a
// peer's way as well.
func (h *Handler) holdsStaleOutput(ctx context.Context, j *janitor.Client, b *v1alpha1.IdentityBinding, d output.Desired) (bool, error) {
	name := output.Name(b.Namespace, b.Name)
	want := d.Labels()
	for _, k := range h.opts.ServedOutputs {
		o := output.New(k)
		found, err := j.Claim(ctx, client.ObjectKey{Name: name}, o)
		var notOwned *janitor.NotOwnedError
		if errors.As(err, &notOwned) {
			continue // not b's: writeOutputs reports it once b may write
		}
		if err != nil {
			return false, fmt.Errorf("read %s output %s: %w", k, name, err)
		}
		if found && !labelsCurrent(o, want) {
			return true, nil
		}
	}
	return false, nil
}

// writeOutputs creates or updates every configured output of b and deletes
// its outputs that are no longer wanted. forbidden is the pass's view of
// b's run of Forbidden answers (confirmForbidden).
func (h *Handler) writeOutputs(ctx context.Context, j *janitor.Client, b *v1alpha1.IdentityBinding, d output.Desired, forbidden *forbiddenPass) ([]v1alpha1.OutputReference, error) {
	name := output.Name(b.Namespace, b.Name)
	// Check every kind before writing any, so a blocked output never makes
	// the pass write one kind and then withdraw it again.
	if len(d.Selectors) > output.MaxSelectors {
		return nil, &blockedOutputError{msg: fmt.Sprintf("%d selectors exceed the %d a SpiffeEntry holds", len(d.Selectors), output.MaxSelectors)}
	}
	for _, k := range h.opts.Outputs {
		if _, err := j.Claim(ctx, client.ObjectKey{Name: name}, output.New(k)); err != nil {
			return nil, err
		}
	}
	// The API server may refuse one kind and accept another (an admission
	// policy, a schema of its own): with more than one kind, every write
	// this pass needs is sent as a dry run first, so a refused kind fails
	// the pass before any is written. Otherwise the pass would write one
	// kind and, failing on the next, withdraw it again, and the withdrawal's
	// event would start the same pass again.
	dryRun := len(h.opts.Outputs) > 1
	if dryRun {
		if why, ok := h.refusals.holds(client.ObjectKeyFromObject(b), b.UID, b.Generation); ok {
			return nil, &blockedOutputError{msg: fmt.Sprintf("the API server refused an output of this spec although its dry run had passed "+
				"(an admission check that judges dry runs differently): %s; it is not written again until the binding's spec changes", why)}
		}
		for _, k := range h.opts.Outputs {
			if err := h.ensure(ctx, j, k, name, d, true); err != nil {
				return nil, h.confirmForbidden(forbidden, err)
			}
		}
	}
	refs := make([]v1alpha1.OutputReference, 0, len(h.opts.Outputs))
	for _, k := range h.opts.Outputs {
		if err := h.ensure(ctx, j, k, name, d, false); err != nil {
			err = h.confirmForbidden(forbidden, err)
			if dryRun && refused(err) {
				h.refusals.add(client.ObjectKeyFromObject(b), b.UID, b.Generation, err)
			}
			return nil, err
		}
		switch k {
		case output.KindSpiffeEntry:
			refs = append(refs, v1alpha1.OutputReference{APIVersion: spiffev1alpha1.GroupVersion.String(), Kind: "SpiffeEntry", Name: name})
		case output.KindClusterSPIFFEID:
			refs = append(refs, v1alpha1.OutputReference{APIVersion: output.ClusterSPIFFEIDGVK().GroupVersion().String(), Kind: output.ClusterSPIFFEIDGVK().Kind, Name: name})
		}
	}
	// Every output this pass wants is written: after the pass, the
	// Controller deletes b's other outputs of every served kind, in every
	// environment (an output written while b carried another environment
	// label, of a kind no longer configured, or under another name would
	// otherwise outlive the spec it was rendered from).
	if err := j.DeclareTypes(h.OwnedTypes()...); err != nil {
		return nil, fmt.Errorf("declare outputs: %w", err)
	}
	return refs, nil
}

// OwnedTypes implements handler.Owner: b's outputs of every served kind,
// so an output of a kind that is no longer configured goes like any other
// output a pass does not want. They are Live: found by owner UID in every
// environment and, on withdrawal, confirmed gone by an uncached read.
func (h *Handler) OwnedTypes() []janitor.ChildType {
	types := make([]janitor.ChildType, 0, len(h.opts.ServedOutputs))
	for _, k := range h.opts.ServedOutputs {
		types = append(types, janitor.ChildType{List: output.NewList(k), Live: true})
	}
	return types
}

// labelsCurrent reports whether obj already carries every label in want.
func labelsCurrent(obj metav1.Object, want map[string]string) bool {
	have := obj.GetLabels()
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

func mergeLabels(obj metav1.Object, add map[string]string) {
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range add {
		l[k] = v
	}
	obj.SetLabels(l)
}

// ensure makes b's output of kind k, named name, what d renders; with
// dryRun the API server only checks the write it would take, and nothing is
// written or kept.
func (h *Handler) ensure(ctx context.Context, j *janitor.Client, k output.Kind, name string, d output.Desired, dryRun bool) error {
	switch k {
	case output.KindSpiffeEntry:
		return h.ensureSpiffeEntry(ctx, j, name, d, dryRun)
	case output.KindClusterSPIFFEID:
		return h.ensureClusterSPIFFEID(ctx, j, name, d, dryRun)
	}
	return fmt.Errorf("output kind %q is not served", k)
}

// writeOutput creates (create) or updates obj as an output; with dryRun
// the API server checks a copy of it, with the marks a write would put on
// it, and nothing is written or recorded. A Forbidden answer is explained:
// the operator's own permissions (access.CallerDeniedError), or
// admission if the write, sent again after the review, is refused too
// (access.RecheckForbidden; if it passes, the write is made).
func writeOutput(ctx context.Context, j *janitor.Client, obj client.Object, create, dryRun bool) error {
	verb := "update"
	if create {
		verb = "create"
	}
	// The review goes through the unscoped client: it is no object of an
	// environment, and the API server refuses labels on it. When it allows
	// the write, the same write is sent again, after the review.
	return access.RecheckForbidden(ctx, j.Client.Client, verb, obj, sendOutput(ctx, j, obj, create, dryRun),
		func(ctx context.Context) error { return sendOutput(ctx, j, obj, create, dryRun) })
}

// sendOutput is writeOutput's request.
func sendOutput(ctx context.Context, j *janitor.Client, obj client.Object, create, dryRun bool) error {
	if !dryRun {
		if create {
			return j.Create(ctx, obj)
		}
		return j.Update(ctx, obj)
	}
	o := obj.DeepCopyObject().(client.Object)
	if err := j.SetOwnership(o); err != nil {
		return err
	}
	if create {
		return j.Client.Create(ctx, o, client.DryRunAll)
	}
	return j.Client.Update(ctx, o, client.DryRunAll)
}

// createError maps a failed create: AlreadyExists means the cache has not
// seen an object yet, which the next pass judges.
func createError(kind, name string, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return ctrlerrors.RetryableErrorf("create %s %s: %w", kind, name, err)
	}
	return fmt.Errorf("create %s %s: %w", kind, name, err)
}

func (h *Handler) ensureSpiffeEntry(ctx context.Context, j *janitor.Client, name string, d output.Desired, dryRun bool) error {
	want := d.SpiffeEntrySpec()
	cur := &spiffev1alpha1.SpiffeEntry{}
	found, err := j.Claim(ctx, client.ObjectKey{Name: name}, cur)
	switch {
	case err != nil:
		return err
	case !found:
		obj := &spiffev1alpha1.SpiffeEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: d.Labels()}, Spec: want}
		if err := writeOutput(ctx, j, obj, true, dryRun); err != nil {
			return createError("SpiffeEntry", name, err)
		}
		return nil
	}
	if equality.Semantic.DeepEqual(cur.Spec, want) && labelsCurrent(cur, d.Labels()) && j.Marked(cur) {
		if !dryRun {
			j.Keep(cur)
		}
		return nil
	}
	cur.Spec = want
	mergeLabels(cur, d.Labels())
	if err := writeOutput(ctx, j, cur, false, dryRun); err != nil {
		return fmt.Errorf("update SpiffeEntry %s: %w", name, err)
	}
	return nil
}

// clusterSPIFFEIDKeys are the spec fields the operator manages; fields that
// others default are left alone and do not cause updates.
var clusterSPIFFEIDKeys = []string{"spiffeIDTemplate", "podSelector", "namespaceSelector", "workloadSelectorTemplates", "hint", "ttl", "jwtTtl", "className",
	"admin", "downstream", "fallback", "autoPopulateDNSNames", "federatesWith", "dnsNameTemplates"}

func managedSpec(spec map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range clusterSPIFFEIDKeys {
		if v, ok := spec[k]; ok {
			out[k] = v
		}
	}
	return out
}

func (h *Handler) ensureClusterSPIFFEID(ctx context.Context, j *janitor.Client, name string, d output.Desired, dryRun bool) error {
	want := d.ClusterSPIFFEIDSpec()
	cur := output.New(output.KindClusterSPIFFEID).(*unstructured.Unstructured)
	found, err := j.Claim(ctx, client.ObjectKey{Name: name}, cur)
	switch {
	case err != nil:
		return err
	case !found:
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": want}}
		obj.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		obj.SetName(name)
		obj.SetLabels(d.Labels())
		if err := writeOutput(ctx, j, obj, true, dryRun); err != nil {
			return createError("ClusterSPIFFEID", name, err)
		}
		return nil
	}
	spec, _, _ := unstructured.NestedMap(cur.Object, "spec")
	if equality.Semantic.DeepEqual(managedSpec(spec), want) && labelsCurrent(cur, d.Labels()) && j.Marked(cur) {
		if !dryRun {
			j.Keep(cur)
		}
		return nil
	}
	if spec == nil {
		spec = map[string]any{}
	}
	for _, k := range clusterSPIFFEIDKeys {
		delete(spec, k)
	}
	for k, v := range want {
		spec[k] = v
	}
	cur.Object["spec"] = spec
	mergeLabels(cur, d.Labels())
	if err := writeOutput(ctx, j, cur, false, dryRun); err != nil {
		return fmt.Errorf("update ClusterSPIFFEID %s: %w", name, err)
	}
	return nil
}

// withdraw deletes every output of b, those this pass wrote included (a
// pass that fails after writing one kind keeps none), and reports whether
// none is left: confirmed by an uncached read, or by an earlier one that
// no write of b's outputs has overtaken and the cache agrees with (see
// janitor.ConfirmedGone).
func (h *Handler) withdraw(ctx context.Context, j *janitor.Client, b *v1alpha1.IdentityBinding) (bool, error) {
	if j == nil {
		return false, fmt.Errorf("withdraw outputs of %s/%s: no janitor in the context", b.Namespace, b.Name)
	}
	gone, err := j.WithdrawAll(ctx, h.OwnedTypes()...)
	if err != nil {
		return false, fmt.Errorf("withdraw outputs: %w", err)
	}
	return gone, nil
}
