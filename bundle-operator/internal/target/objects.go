package target

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/shared"
)

// Kind is the kind of a namespaced target object.
type Kind string

const (
	// KindConfigMap targets ConfigMaps (data holds text).
	KindConfigMap Kind = "ConfigMap"
	// KindSecret targets Secrets (data holds base64).
	KindSecret Kind = "Secret"
)

// Objects writes ConfigMap and Secret targets.
type Objects struct {
	// Cache reads PartialObjectMetadata of targets from the metadata-only
	// cache filtered by LabelTrustBundle (in the source namespaces it holds
	// every ConfigMap: only the label makes an object ours).
	Cache client.Reader
	// Client applies and deletes.
	Client client.Client
	// Live lists object metadata from the API server, uncached: a write
	// that finds an object of the target's name someone else created needs
	// it to see whether any writer owns a field of that object. It lists
	// (by name) rather than gets, so that the operator needs no get right
	// on the target kind (see inspect).
	Live client.Reader
	// Workers bounds concurrent writes; 0 means 16.
	Workers int
	// Expectations, when set, suppress duplicate writes while the cache
	// has not yet seen our last write. Feed them from the target watch.
	Expectations *Expectations

	// left remembers the targets a release left in place (see release).
	left leftInPlace
}

// leftInPlace remembers, by TrustBundle, kind, namespace and name, the
// resourceVersion of each target a release left in place, so that an
// object nobody changed since is not tried again on every pass.
type leftInPlace struct {
	mu sync.Mutex
	rv map[leftKey]string
}

type leftKey struct {
	bundle          string
	kind            Kind
	namespace, name string
}

// unchanged reports whether k was left in place at resourceVersion rv.
func (l *leftInPlace) unchanged(k leftKey, rv string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	have, ok := l.rv[k]
	return ok && have == rv
}

func (l *leftInPlace) record(k leftKey, rv string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rv == nil {
		l.rv = map[leftKey]string{}
	}
	l.rv[k] = rv
}

// release releases m, the target key names (what, in reports), through w,
// as an object of kind gvk, unless a release of it left it in place and it
// has not changed since. One the API server refuses without our fields
// (shared.ErrLeftInPlace) is recorded and named in the report's Left, not
// failed. It returns the resourceVersion the release leads to, the report
// of the write, and whether the object was released.
func (l *leftInPlace) release(ctx context.Context, w shared.Writer, key leftKey, m *metav1.PartialObjectMetadata,
	gvk schema.GroupVersionKind, what string) (rv string, rep Report, released bool) {
	if l.unchanged(key, m.ResourceVersion) {
		return "", rep, false
	}
	target := m.DeepCopy()
	target.SetGroupVersionKind(gvk)
	rv, err := w.Release(ctx, target)
	switch {
	case errors.Is(err, shared.ErrLeftInPlace):
		l.record(key, m.ResourceVersion)
		rep.Left = append(rep.Left, fmt.Sprintf("%s: %v", what, err))
	case err != nil:
		rep.Fail("release "+what, err)
	default:
		rep.Written++
		return rv, rep, true
	}
	return "", rep, false
}

// keepOnly forgets the targets of bundle and kind that are not in stale:
// released since, deleted, or no longer labelled as the bundle's.
func (l *leftInPlace) keepOnly(bundle string, kind Kind, stale []*metav1.PartialObjectMetadata) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.rv) == 0 {
		return
	}
	still := make(map[leftKey]bool, len(stale))
	for _, m := range stale {
		still[leftKey{bundle: bundle, kind: kind, namespace: m.Namespace, name: m.Name}] = true
	}
	for k := range l.rv {
		if k.bundle == bundle && k.kind == kind && !still[k] {
			delete(l.rv, k)
		}
	}
}

// Desired is the content every target of one kind should hold.
type Desired struct {
	// Bundle is the TrustBundle's name.
	Bundle string
	// Kind is ConfigMap or Secret.
	Kind Kind
	// Name is the object name in each namespace.
	Name string
	// Namespaces are the selected namespaces.
	Namespaces []string
	// Data maps each key to its content.
	Data map[string][]byte
	// Binary names the keys of Data a ConfigMap holds in binaryData.
	Binary map[string]bool
	// Labels go on every target; they must include LabelTrustBundle.
	Labels map[string]string
}

// selected returns d's namespaces as a set.
func (d Desired) selected() map[string]bool {
	set := make(map[string]bool, len(d.Namespaces))
	for _, ns := range d.Namespaces {
		set[ns] = true
	}
	return set
}

// Sync brings every selected namespace's target in line with d and releases
// our targets in namespaces that are no longer selected (or under an old
// name). Unchanged targets are not written.
func (o *Objects) Sync(ctx context.Context, d Desired) Report {
	hash := Hash(d.Data)
	var (
		mu  sync.Mutex
		rep Report
	)
	record := func(r Report) {
		mu.Lock()
		rep.Add(r)
		mu.Unlock()
	}
	o.parallel(ctx, len(d.Namespaces), func(i int) {
		record(o.syncOne(ctx, d, d.Namespaces[i], hash))
	})

	selected := d.selected()
	owned, err := o.list(ctx, d.Kind, d.Labels)
	if err != nil {
		rep.Fail(fmt.Sprintf("list %ss of %s", d.Kind, d.Bundle), err)
		return rep
	}
	var stale []*metav1.PartialObjectMetadata
	for i := range owned {
		if !selected[owned[i].Namespace] || owned[i].Name != d.Name {
			stale = append(stale, &owned[i])
		}
	}
	o.left.keepOnly(d.Bundle, d.Kind, stale)
	o.parallel(ctx, len(stale), func(i int) { record(o.release(ctx, d.Bundle, d.Kind, stale[i])) })
	return rep
}

// Fill creates the targets of d in the namespaces where no object of that
// name exists yet, and writes nothing else: no update, no release. It runs
// while the sources fail, with d holding the last good bundle. Creation is
// the same server-side apply as Sync, so once the sources render the same
// bundle again the targets are in sync and are not written.
//
// d must be exactly what the existing targets hold: when targets of d.Name
// exist in the selected namespaces, with a hash annotation our field
// manager still owns, and none carries d's hash, Fill creates nothing and
// returns an error (the last good bundle it was given is not the one they
// were written with).
func (o *Objects) Fill(ctx context.Context, d Desired) (Report, error) {
	var rep Report
	hash := Hash(d.Data)
	owned, err := o.list(ctx, d.Kind, d.Labels)
	if err != nil {
		return rep, fmt.Errorf("list %ss of %s: %w", d.Kind, d.Bundle, err)
	}
	// Only the targets of selected namespaces count: an object anyone
	// labels as the bundle's in a namespace it does not select is no
	// target, and must not stop the selected ones from getting the bundle.
	selected := d.selected()
	matching := 0
	var others []*metav1.PartialObjectMetadata
	for i := range owned {
		m := &owned[i]
		if m.Name != d.Name || !selected[m.Namespace] || !ownsEvidence(m.ManagedFields, d.Labels) {
			// Nor does a target whose hash annotation or ownership
			// labels someone else wrote last: whoever may edit one
			// namespace's target must not decide what another namespace
			// gets (by labelling it another owner's before a bundle
			// change, so that it keeps the bundle before, and ours again
			// during a failure, say).
			continue
		}
		if m.Annotations[AnnotationHash] == hash {
			matching++
		} else {
			others = append(others, m)
		}
	}
	if matching == 0 && len(others) > 0 {
		if err := o.anyWritableOther(ctx, d, hash, others); err != nil {
			return rep, err
		}
	}
	var mu sync.Mutex
	o.parallel(ctx, len(d.Namespaces), func(i int) {
		r := o.createOne(ctx, d, d.Namespaces[i], hash)
		mu.Lock()
		rep.Add(r)
		mu.Unlock()
	})
	return rep, nil
}

// anyWritableOther returns an error unless every target of others (which
// hold a bundle other than d, under our hash annotation) is frozen: a
// ConfigMap or Secret made immutable since we wrote it, which the API
// server refuses to change, or one the policy on our writes refuses. A frozen target holds whatever it held when its
// writer froze it, so it says nothing about the bundle we published last:
// whoever may edit one selected namespace's target could otherwise freeze
// it before a bundle change and so stop every other selected namespace from
// getting the last good bundle during a later failure. Each target is
// probed with a dry-run write of d, which reads none of its data; the
// probes stop at the first target that would take it.
func (o *Objects) anyWritableOther(ctx context.Context, d Desired, hash string, others []*metav1.PartialObjectMetadata) error {
	w := writer(o.Client)
	for _, m := range others {
		err := w.Apply(ctx, applyObject(d, m.Namespace, hash), true, client.DryRunAll)
		if shared.RefusedByFieldValidation(err) || w.RefusedByOwnPolicy(err) {
			// Frozen, or one our policy on our writes refuses (a tenant
			// made it too large to judge, say): its writer decides
			// what it holds, not us.
			continue
		}
		why := "it would take the last good bundle"
		if err != nil {
			why = fmt.Sprintf("a dry-run write of the last good bundle to it failed: %v", err)
		}
		return fmt.Errorf("the %d existing targets hold a bundle other than the last published one (%s/%s has hash %q, not %q; %s)",
			len(others), m.Namespace, m.Name, m.Annotations[AnnotationHash], hash, why)
	}
	return nil
}

// createOne creates the target of d in ns unless an object of its name
// exists: our target in the cache, a write of ours on its way to the cache,
// or any object the API server holds (the create-only write fails with a
// conflict then, and the object is left as it is).
func (o *Objects) createOne(ctx context.Context, d Desired, ns, hash string) Report {
	var rep Report
	what := fmt.Sprintf("%s %s/%s", d.Kind, ns, d.Name)
	key := client.ObjectKey{Namespace: ns, Name: d.Name}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(string(d.Kind)))
	err := o.Cache.Get(ctx, key, m)
	switch {
	case err == nil:
		return rep
	case !apierrors.IsNotFound(err):
		rep.Fail(what, err)
		return rep
	case !o.expectationsMet(d.Kind, ns, d.Name, ""):
		return rep
	}
	obj := applyObject(d, ns, hash)
	obj.SetResourceVersion(shared.CreateOnly)
	rep, err = o.write(ctx, d, ns, obj, false)
	if err != nil && !apierrors.IsConflict(err) {
		rep.Fail(what, err)
	}
	return rep
}

// ReleaseAll releases every target of kind whose labels make it a target
// of the owner that labels (the labels of its targets, naming the
// TrustBundle under LabelTrustBundle) name: when the TrustBundle is deleted
// or the target kind is removed from its spec. It lists the cache, which
// shows a write of ours only once its watch event arrived: a target that
// a write of the TrustBundle's content (a create or an update) went to
// and that the cache does not show yet is reported as failed
// (errWriteNotSeen), so the release is retried rather than taken as done.
func (o *Objects) ReleaseAll(ctx context.Context, kind Kind, labels map[string]string) Report {
	var rep Report
	bundle := labels[LabelTrustBundle]
	if o.Expectations != nil {
		// Judged before the list: the cache only moves on, so a write
		// it shows now is in the list too, and one it does not show yet
		// is reported here (release skips it in the list).
		unseen, _ := unseenWrites(ctx, o.Cache, o.Expectations, kind, corev1.SchemeGroupVersion.WithKind(string(kind)),
			o.Expectations.writing(kind, bundle))
		rep.Add(unseen)
	}
	owned, err := o.list(ctx, kind, labels)
	if err != nil {
		rep.Fail(fmt.Sprintf("list %ss of %s", kind, bundle), err)
		return rep
	}
	stale := make([]*metav1.PartialObjectMetadata, len(owned))
	for i := range owned {
		stale[i] = &owned[i]
	}
	o.left.keepOnly(bundle, kind, stale)
	var mu sync.Mutex
	o.parallel(ctx, len(owned), func(i int) {
		r := o.release(ctx, bundle, kind, &owned[i])
		mu.Lock()
		rep.Add(r)
		mu.Unlock()
	})
	return rep
}

// parallel runs f for 0..n-1 on at most Workers goroutines (16 when unset).
func (o *Objects) parallel(ctx context.Context, n int, f func(i int)) {
	workers := o.Workers
	if workers <= 0 {
		workers = 16
	}
	workqueue.ParallelizeUntil(ctx, workers, n, f)
}

// list returns the targets of kind the cache holds whose labels make them
// targets of the owner that labels name (see ownedBy); objects that only
// carry its TrustBundle label are left out.
func (o *Objects) list(ctx context.Context, kind Kind, labels map[string]string) ([]metav1.PartialObjectMetadata, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(string(kind) + "List"))
	if err := o.Cache.List(ctx, l, client.MatchingLabels{LabelTrustBundle: labels[LabelTrustBundle]}); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(l.Items, func(m metav1.PartialObjectMetadata) bool { return !ownedBy(m.Labels, labels) }), nil
}

func (o *Objects) syncOne(ctx context.Context, d Desired, ns, hash string) Report {
	var rep Report
	what := fmt.Sprintf("%s %s/%s", d.Kind, ns, d.Name)
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(string(d.Kind)))
	err := o.Cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: d.Name}, m)
	if err != nil && !apierrors.IsNotFound(err) {
		rep.Fail(what, err)
		return rep
	}
	if !o.expectationsMet(d.Kind, ns, d.Name, m.ResourceVersion) {
		// Our write is on its way to the cache; its watch event requeues.
		rep.InSync++
		return rep
	}
	if err == nil && InSync(m, d, hash) {
		rep.InSync++
		return rep
	}
	if err == nil {
		if err := heldByOther(m.Labels, d.Labels); err != nil {
			rep.Fail(what, err)
			return rep
		}
	}
	if err == nil && ownedBy(m.Labels, d.Labels) {
		// Labelled as ours, owner and environment: forced, to repair a
		// hand edit of our keys. Being in the cache alone does not make
		// an object ours (the cache holds every ConfigMap of a source
		// namespace), nor does our TrustBundle label alone.
		return o.apply(ctx, d, ns, hash, what, true)
	}
	return o.claim(ctx, d, ns, hash, what, err == nil)
}

// claim writes the target of d in ns, which the cache does not hold as
// ours. The write creates it only where no object of its name exists, so
// it costs no more requests than an apply. Where one exists, someone else
// created it: it is written beside its writers' fields, without force,
// only when some writer owns a field of it, since then our release can
// tell it is shared and drop only our fields. One no writer owns a field
// of (an empty ConfigMap) would be ours alone after our write and deleted
// on release, so it is left as it is and reported. With cached set, the
// cache already shows an object of that name that is not ours (a source
// namespace's ConfigMap), so the create-only write is skipped.
func (o *Objects) claim(ctx context.Context, d Desired, ns, hash, what string, cached bool) Report {
	var rep Report
	if !cached {
		obj := applyObject(d, ns, hash)
		obj.SetResourceVersion(shared.CreateOnly)
		var err error
		rep, err = o.write(ctx, d, ns, obj, false)
		if !apierrors.IsConflict(err) {
			if err != nil {
				rep.Fail(what, err)
			}
			return rep
		}
	}
	m, err := o.inspect(ctx, d.Kind, ns, d.Name)
	switch {
	case apierrors.IsNotFound(err):
		// Deleted since: the next pass creates it.
		rep.Fail(what, errors.New("an object of that name was deleted while being written"))
		return rep
	case err != nil:
		rep.Fail(what, err)
		return rep
	case len(m.ManagedFields) == 0:
		rep.Fail(what, errors.New("held by an object another writer created holding no field any writer owns, left alone"))
		return rep
	}
	if err := heldByOther(m.Labels, d.Labels); err != nil {
		// Another TrustBundle created it after our cache last saw the name.
		rep.Fail(what, err)
		return rep
	}
	return o.apply(ctx, d, ns, hash, what, false)
}

// inspect reads the metadata of the object kind ns/name from the API
// server. It lists by name instead of getting: the target cache's watch
// already needs list on every object of the kind, which reads every one of
// them, so a get right would add nothing but a verb to the role.
func (o *Objects) inspect(ctx context.Context, kind Kind, ns, name string) (*metav1.PartialObjectMetadata, error) {
	gk := corev1.SchemeGroupVersion.WithKind(string(kind)).GroupKind()
	if o.Live == nil {
		return nil, fmt.Errorf("an object of that name exists and there is no live reader to inspect it")
	}
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(string(kind) + "List"))
	if err := o.Live.List(ctx, l, client.InNamespace(ns), client.MatchingFields{"metadata.name": name}); err != nil {
		return nil, err
	}
	for i := range l.Items {
		if l.Items[i].Name == name {
			return &l.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: gk.Group, Resource: strings.ToLower(string(kind)) + "s"}, name)
}

// apply writes target d in namespace ns (what names it in failures) and
// remembers the write until the cache has seen it. With force it takes
// over fields other writers own; without, it leaves an object whose
// writers own one of our fields untouched and reports the conflict.
func (o *Objects) apply(ctx context.Context, d Desired, ns, hash, what string, force bool) Report {
	rep, err := o.write(ctx, d, ns, applyObject(d, ns, hash), force)
	if err != nil {
		rep.Fail(what, err)
	}
	return rep
}

// write applies obj, the target of d in ns, and remembers the write until
// the cache has seen it.
func (o *Objects) write(ctx context.Context, d Desired, ns string, obj *unstructured.Unstructured, force bool) (Report, error) {
	var rep Report
	if err := applyOurs(ctx, o.Client, obj, force); err != nil {
		return rep, err
	}
	if o.Expectations != nil {
		o.Expectations.expectFor(d.Bundle, d.Kind, ns, d.Name, obj.GetResourceVersion())
	}
	rep.InSync++
	rep.Written++
	return rep, nil
}

func applyObject(d Desired, ns, hash string) *unstructured.Unstructured {
	data := make(map[string]any, len(d.Data))
	binaryData := map[string]any{}
	for k, v := range d.Data {
		switch {
		case d.Kind == KindSecret:
			data[k] = base64.StdEncoding.EncodeToString(v)
		case d.Binary[k]:
			binaryData[k] = base64.StdEncoding.EncodeToString(v)
		default:
			data[k] = string(v)
		}
	}
	labels := make(map[string]any, len(d.Labels))
	for k, v := range d.Labels {
		labels[k] = v
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       string(d.Kind),
		"metadata": map[string]any{
			"name":        d.Name,
			"namespace":   ns,
			"labels":      labels,
			"annotations": map[string]any{AnnotationHash: hash, AnnotationKeys: keysAnnotation(d.Data)},
		},
	}}
	if len(data) > 0 || len(binaryData) == 0 {
		obj.Object["data"] = data
	}
	if len(binaryData) > 0 {
		obj.Object["binaryData"] = binaryData
	}
	return obj
}

// InSync reports, from metadata alone, whether m holds d's content: the hash
// annotation matches, the labels are ours, and our field manager owns
// exactly the data keys of d. A key edited or removed by someone else
// leaves our managedFields entry, so hand edits are seen without reading data.
func InSync(m *metav1.PartialObjectMetadata, d Desired, hash string) bool {
	if m.GetDeletionTimestamp() != nil || m.Annotations[AnnotationHash] != hash {
		return false
	}
	for k, v := range d.Labels {
		if m.Labels[k] != v {
			return false
		}
	}
	owned, ok := ownedDataKeys(m.ManagedFields)
	if !ok || len(owned) != len(d.Data) {
		return false
	}
	for k := range d.Data {
		if !owned[k] {
			return false
		}
	}
	return true
}

// ourApply returns the raw fields of our Apply entry in a target's managed
// fields, and false when there is none. Each reader decodes only the part
// it reads, so a part it does not read never makes it fail.
func ourApply(entries []metav1.ManagedFieldsEntry) ([]byte, bool) {
	for _, e := range entries {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.FieldsV1 != nil {
			return e.FieldsV1.Raw, true
		}
	}
	return nil, false
}

// ownsMetadata reports whether our Apply entry owns every one of the
// annotations and labels named: no other writer has changed one since we
// wrote it.
func ownsMetadata(entries []metav1.ManagedFieldsEntry, annotations, labels []string) bool {
	raw, ok := ourApply(entries)
	var fields struct {
		Metadata struct {
			Annotations map[string]json.RawMessage `json:"f:annotations"`
			Labels      map[string]json.RawMessage `json:"f:labels"`
		} `json:"f:metadata"`
	}
	if !ok || json.Unmarshal(raw, &fields) != nil {
		return false
	}
	for _, a := range annotations {
		if _, owned := fields.Metadata.Annotations["f:"+a]; !owned {
			return false
		}
	}
	for _, l := range labels {
		if _, owned := fields.Metadata.Labels["f:"+l]; !owned {
			return false
		}
	}
	return true
}

// ownedDataKeys returns the data keys our Apply entry owns.
func ownedDataKeys(entries []metav1.ManagedFieldsEntry) (map[string]bool, bool) {
	raw, ok := ourApply(entries)
	var fields struct {
		Data       map[string]json.RawMessage `json:"f:data"`
		BinaryData map[string]json.RawMessage `json:"f:binaryData"`
	}
	if !ok || json.Unmarshal(raw, &fields) != nil {
		return nil, false
	}
	keys := make(map[string]bool, len(fields.Data)+len(fields.BinaryData))
	for _, m := range []map[string]json.RawMessage{fields.Data, fields.BinaryData} {
		for k := range m {
			if len(k) > 2 && k[:2] == "f:" {
				keys[k[2:]] = true
			}
		}
	}
	return keys, true
}

// release takes our keys out of m, a target of bundle: an object only we
// manage is deleted (preconditioned on its UID and resourceVersion, so a
// concurrent edit wins); an object shared with others gets an empty apply,
// which drops exactly the fields our manager owned and leaves the rest. A
// shared object the API server refuses without our keys (its other writer
// made it immutable, say) is left in place and reported in Report.Left,
// not as a failure, and not tried again until it changes. A target a
// write of ours is still on its way to is skipped: a release of ours is
// done already, and a write of content is reported by ReleaseAll (a pass
// that releases it from Sync is requeued by its watch event).
func (o *Objects) release(ctx context.Context, bundle string, kind Kind, m *metav1.PartialObjectMetadata) Report {
	if !o.expectationsMet(kind, m.Namespace, m.Name, m.ResourceVersion) {
		return Report{}
	}
	w := writer(o.Client)
	deletes := !w.Shared(m.ManagedFields)
	key := leftKey{bundle: bundle, kind: kind, namespace: m.Namespace, name: m.Name}
	rv, rep, released := o.left.release(ctx, w, key, m, corev1.SchemeGroupVersion.WithKind(string(kind)),
		fmt.Sprintf("%s %s/%s", kind, m.Namespace, m.Name))
	switch {
	case released && deletes:
		o.expectGone(kind, m.Namespace, m.Name, rv)
	case released:
		o.expect(kind, m.Namespace, m.Name, rv)
	}
	return rep
}

func (o *Objects) expectationsMet(kind Kind, ns, name, cachedRV string) bool {
	return o.Expectations == nil || o.Expectations.satisfied(kind, ns, name, cachedRV)
}

func (o *Objects) expect(kind Kind, ns, name, rv string) {
	if o.Expectations != nil {
		o.Expectations.expect(kind, ns, name, rv)
	}
}

func (o *Objects) expectGone(kind Kind, ns, name, rv string) {
	if o.Expectations != nil {
		o.Expectations.expectGone(kind, ns, name, rv)
	}
}
