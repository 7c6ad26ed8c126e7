package trustbundle

import (
	"encoding/json"
	"fmt"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
)

const (
	// maxDataSize is what Kubernetes accepts in the data of one ConfigMap or
	// Secret: 1 MiB over all keys and values.
	maxDataSize = 1 << 20
	// maxCABundleSize bounds an injected caBundle the same way; the object
	// around it must still fit etcd's request limit.
	maxCABundleSize = 1 << 20
	// maxStatusSize bounds the recorded certificates and formats, so that
	// the status stays well within etcd's 1.5 MiB request limit.
	maxStatusSize = 1 << 20
	// etcdRequestLimit is etcd's default request limit, which the whole
	// TrustBundle (metadata, spec and status) must fit in.
	etcdRequestLimit = 3 << 19
	// objectMargin leaves room beside the spec and the record for the
	// metadata's managed fields and the status fields that do not grow
	// with the bundle (conditions, targets, fingerprint).
	objectMargin = 128 << 10
)

// statusRoom returns how many bytes the recorded certificates and formats
// may take in tb: maxStatusSize, or less where the spec (an inline source
// of up to 1 MiB) and the metadata leave less of etcd's request limit.
func statusRoom(tb *v1alpha1.TrustBundle) (int, error) {
	spec, err := json.Marshal(tb.Spec)
	if err != nil {
		return 0, fmt.Errorf("measure the spec: %w", err)
	}
	meta, err := json.Marshal(tb.ObjectMeta)
	if err != nil {
		return 0, fmt.Errorf("measure the metadata: %w", err)
	}
	return max(0, min(maxStatusSize, etcdRequestLimit-len(spec)-len(meta)-objectMargin)), nil
}

// checkSizes fails with BundleTooLarge, naming the sizes, when a rendered
// target would not fit in Kubernetes. It runs before
// any write, so nothing is written and every target keeps its last good
// bundle.
func checkSizes(tb *v1alpha1.TrustBundle, f *formats) error {
	tooLarge := func(what string, size, limit int) error {
		return ctrlerrors.WithReason(ReasonBundleTooLarge, ctrlerrors.BlockedErrorf(
			"%s would be %d bytes, over the limit of %d; nothing is written and targets keep their last good bundle %s",
			what, size, limit, tb.Status.Fingerprint))
	}
	for _, o := range []*v1alpha1.ObjectTarget{tb.Spec.Target.ConfigMap, tb.Spec.Target.Secret} {
		if o == nil {
			continue
		}
		data, err := f.data(o.Keys)
		if err != nil {
			continue // reported per target kind by sync
		}
		size := 0
		for k, v := range data {
			size += len(k) + len(v)
		}
		if size > maxDataSize {
			return tooLarge(fmt.Sprintf("the data of each target %q", o.Name), size, maxDataSize)
		}
	}
	if len(f.pem) > maxCABundleSize {
		return tooLarge("an injected caBundle", len(f.pem), maxCABundleSize)
	}
	return nil
}

// fitStatus returns the status record of certs, without their PEM when the
// record would not fit with it (the fingerprints, subjects and expiries
// stay; the last good bundle can then not be rebuilt for new targets, and
// nothing can be retained), or BundleTooLarge when it fits neither way. The
// room is what statusRoom leaves: a record that fits on its own but not
// beside a large inline source would make every status write fail, and
// with it the record of what was published and when a CA left its source.
func fitStatus(tb *v1alpha1.TrustBundle, certs []v1alpha1.PublishedCertificate, rec *v1alpha1.PublishedFormats) ([]v1alpha1.PublishedCertificate, error) {
	room, err := statusRoom(tb)
	if err != nil {
		return nil, err
	}
	size, err := statusSize(certs, rec)
	if err != nil || size <= room {
		return certs, err
	}
	stripped := make([]v1alpha1.PublishedCertificate, len(certs))
	for i := range certs {
		certs[i].DeepCopyInto(&stripped[i])
		stripped[i].PEM = ""
	}
	small, err := statusSize(stripped, rec)
	if err != nil {
		return nil, err
	}
	if small > room {
		return nil, ctrlerrors.WithReason(ReasonBundleTooLarge, ctrlerrors.BlockedErrorf(
			"the status record of the bundle would be %d bytes even without the certificates' PEM, over the %d bytes the spec and metadata leave of etcd's limit of %d; "+
				"nothing is written and targets keep their last good bundle %s",
			small, room, etcdRequestLimit, tb.Status.Fingerprint))
	}
	return stripped, nil
}

// statusSize is the JSON size of the status fields that grow with the bundle.
func statusSize(certs []v1alpha1.PublishedCertificate, rec *v1alpha1.PublishedFormats) (int, error) {
	raw, err := json.Marshal(struct {
		Certificates []v1alpha1.PublishedCertificate `json:"certificates"`
		Formats      *v1alpha1.PublishedFormats      `json:"formats"`
	}{certs, rec})
	if err != nil {
		return 0, fmt.Errorf("measure the status: %w", err)
	}
	return len(raw), nil
}
