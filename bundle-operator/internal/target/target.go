package target

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/shared"
)

const (
	// FieldManager is the server-side apply field manager of every write.
	FieldManager = "trustplane-bundle-operator"
	// LabelTrustBundle marks a ConfigMap or Secret target with the name of
	// its TrustBundle; the target cache selects on it.
	LabelTrustBundle = "bundle.trustplane.dev/trustbundle"
	// AnnotationHash holds the hash of the data we wrote, so an unchanged
	// bundle is recognised from metadata alone.
	AnnotationHash = "bundle.trustplane.dev/hash"
	// AnnotationKeys lists, comma-separated, the keys of a target the
	// operator writes (a ClusterTrustBundle's: trustBundle). The admission
	// policy on the operator's writes (config/rbac/target_policy.yaml) lets
	// it change an existing key only when the key is listed here or its
	// field manager owns it, and list only keys it may change, so that it
	// can repair its own key after a hand edit took the key's ownership,
	// and never change a key of someone else's.
	AnnotationKeys = "bundle.trustplane.dev/keys"
	// TargetPolicy is the name of that admission policy. It refuses a
	// release only for what others wrote in the target (a key they listed,
	// a key they added under our field manager's name), which no retry
	// changes: such a target is left in place and reported, like one the
	// API server refuses without our keys, and holds up neither the other
	// targets nor the TrustBundle's deletion.
	TargetPolicy = "bundle-operator-targets.trustplane.dev"
	// maxFailuresNamed caps the failures a Report names.
	maxFailuresNamed = 5
)

// Report counts the targets of one pass.
type Report struct {
	// InSync counts targets that hold the desired content after the pass.
	InSync int
	// Written counts targets written (created, updated or released).
	Written int
	// Failed names the targets that could not be written, with the error;
	// at most maxFailuresNamed are named, FailedCount counts all.
	Failed []string
	// FailedCount counts all failed targets.
	FailedCount int
	// Skipped names the annotated objects that cannot take a caBundle (a
	// CRD without a conversion webhook, a webhook configuration without
	// webhooks), with why; they are not failures.
	Skipped []string
	// Left names the targets a release left in place, with why (see
	// shared.ErrLeftInPlace): another writer shares them and the API server
	// refuses them without our keys. They are not failures: nothing more
	// can be done with them, and they must not hold up the others.
	Left []string
}

// Add merges o into r.
func (r *Report) Add(o Report) {
	r.InSync += o.InSync
	r.Written += o.Written
	r.FailedCount += o.FailedCount
	r.Skipped = append(r.Skipped, o.Skipped...)
	r.Left = append(r.Left, o.Left...)
	for _, f := range o.Failed {
		if len(r.Failed) < maxFailuresNamed {
			r.Failed = append(r.Failed, f)
		}
	}
}

// Fail records that what could not be written because of err.
func (r *Report) Fail(what string, err error) {
	r.FailedCount++
	if len(r.Failed) < maxFailuresNamed {
		r.Failed = append(r.Failed, fmt.Sprintf("%s: %v", what, err))
	}
}

// Hash returns the hex SHA-256 over the sorted keys and values of data.
func Hash(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// keysAnnotation is the value of AnnotationKeys for data's keys.
func keysAnnotation[V any](data map[string]V) string {
	return strings.Join(slices.Sorted(maps.Keys(data)), ",")
}

// ownedBy reports whether have, an object's labels, make it a target of
// the owner that want, the labels of that owner's targets, name: the
// TrustBundle's name and the owner labels (UID, kind, name, namespace)
// all equal, a label absent from want absent from have. Every TrustBundle
// of every instance writes with the same field manager, so the managed
// fields cannot tell whose target an object is; only these labels can,
// and a TrustBundle label alone (the one the target cache selects on,
// which anyone who may edit the object can set) does not. The environment
// label is not compared: the owner's UID is unique, and a TrustBundle
// moved to another environment (or with its label removed) keeps its
// targets, whose label the next write updates.
func ownedBy(have, want map[string]string) bool {
	return have[LabelTrustBundle] == want[LabelTrustBundle] && sameOwner(have, want)
}

// sameOwner reports whether the owner labels of have and want are equal, a
// label absent from want absent from have.
func sameOwner(have, want map[string]string) bool {
	for _, k := range [...]string{labels.OwnerUID, labels.OwnerKind, labels.OwnerName, labels.OwnerNamespace} {
		if have[k] != want[k] {
			return false
		}
	}
	return true
}

// heldByOther returns an error when have, an object's labels, claim it for
// an owner other than the one want names (see ownedBy): its TrustBundle
// label names another TrustBundle, it carries that label without owner
// labels, or its owner labels name another owner. One TrustBundle never
// writes over another's target, nor over the target an earlier TrustBundle
// of the same name (another UID) wrote. An object that claims no
// owner is nobody's target, and may be written beside its writers' fields;
// so may one whose owner labels are ours and whose TrustBundle label was
// removed by hand (the write puts it back).
func heldByOther(have, want map[string]string) error {
	bundle, claimed := have[LabelTrustBundle]
	_, owned := have[labels.OwnerUID]
	switch {
	case !claimed && !owned, ownedBy(have, want):
		return nil
	case claimed && bundle != want[LabelTrustBundle]:
		return fmt.Errorf("held by TrustBundle %q, left alone", bundle)
	case !owned:
		return fmt.Errorf("labelled as TrustBundle %q's target without its owner labels (not written by it), left alone", bundle)
	case sameOwner(have, want):
		return nil
	}
	return fmt.Errorf("labelled as the target of another owner, %s %q (UID %q), not of this TrustBundle (UID %q); left alone: delete it if that owner is gone",
		have[labels.OwnerKind], have[labels.OwnerName], have[labels.OwnerUID], want[labels.OwnerUID])
}

// ownsEvidence reports whether our Apply entry owns what makes a target
// evidence of what we published (see Objects.Fill): its hash annotation,
// and the labels that make it ours, the TrustBundle label and the owner
// UID want (the labels of the owner's targets) carries.
func ownsEvidence(entries []metav1.ManagedFieldsEntry, want map[string]string) bool {
	ours := []string{LabelTrustBundle}
	if want[labels.OwnerUID] != "" {
		ours = append(ours, labels.OwnerUID)
	}
	return ownsMetadata(entries, []string{AnnotationHash}, ours)
}

// writer writes targets as our field manager.
func writer(c client.Client) shared.Writer {
	return shared.Writer{Client: c, FieldManager: FieldManager, Policies: []string{TargetPolicy}}
}

// applyOurs server-side applies obj with our field manager. With force it
// takes over fields other writers own (only for an object labelled as
// ours, to repair a hand edit); without, an object whose writers own one
// of the fields is left untouched and the conflict is returned as such.
func applyOurs(ctx context.Context, c client.Client, obj *unstructured.Unstructured, force bool) error {
	err := writer(c).Apply(ctx, obj, force)
	if apierrors.IsConflict(err) {
		return fmt.Errorf("held by an object another writer created, left alone: %w", err)
	}
	return err
}
