package entries

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// PodLabelPrefix starts the value of a k8s selector of a pod's label.
const PodLabelPrefix = "pod-label:"

// PodLabelSelector is the selector of the pods that carry label key=value.
func PodLabelSelector(key, value string) Selector {
	return Selector{Type: "k8s", Value: PodLabelPrefix + key + ":" + value}
}

// PodShape is what an entry's selectors ask of a pod, when they are all
// k8s:ns, k8s:sa and k8s:pod-label selectors (the ones the operator can
// check against its pod cache).
type PodShape struct {
	// Namespace and ServiceAccount the pod must run in and as.
	Namespace, ServiceAccount string
	// Labels the pod must carry (at least).
	Labels map[string]string
	// PodUID, when set, is the one pod the shape matches (k8s:pod-uid).
	PodUID string
	// Narrowing are the values of the entry's k8s selectors about a pod's
	// containers, images, owner or node, in order: the shape leaves them
	// out (see ShapeOf).
	Narrowing []string
}

// ShapeOf returns the pod shape of e, and false when e has a selector of
// another kind, lacks the namespace or service account, or can match no pod
// at all (two namespaces, two service accounts or two values of one label:
// SPIRE requires every selector to match). Selectors of a pod's containers,
// images, owner or node (what workloadSelectorTemplates add) only narrow
// which of the shape's pods match; the shape leaves them out, so it
// matches every pod that such an entry may serve, and perhaps more.
func ShapeOf(e *Entry) (PodShape, bool) {
	var sh PodShape
	// set records v in *field, and fails when another value is there.
	set := func(field *string, v string) bool {
		if *field != "" && *field != v {
			return false
		}
		*field = v
		return true
	}
	for _, sel := range e.Selectors {
		if sel.Type != "k8s" {
			return PodShape{}, false
		}
		ok := true
		switch {
		case strings.HasPrefix(sel.Value, "ns:"):
			ok = set(&sh.Namespace, strings.TrimPrefix(sel.Value, "ns:"))
		case strings.HasPrefix(sel.Value, "sa:"):
			ok = set(&sh.ServiceAccount, strings.TrimPrefix(sel.Value, "sa:"))
		case narrowing(sel.Value):
			sh.Narrowing = append(sh.Narrowing, sel.Value)
		case strings.HasPrefix(sel.Value, "pod-uid:"):
			ok = set(&sh.PodUID, strings.TrimPrefix(sel.Value, "pod-uid:"))
		case strings.HasPrefix(sel.Value, PodLabelPrefix):
			k, v, cut := strings.Cut(strings.TrimPrefix(sel.Value, PodLabelPrefix), ":")
			if !cut {
				return PodShape{}, false
			}
			if sh.Labels == nil {
				sh.Labels = map[string]string{}
			}
			if have, dup := sh.Labels[k]; dup && have != v {
				return PodShape{}, false
			}
			sh.Labels[k] = v
		default:
			ok = false
		}
		if !ok {
			return PodShape{}, false
		}
	}
	return sh, sh.Namespace != "" && sh.ServiceAccount != ""
}

// AccountOf returns "namespace/serviceAccount" of the pods e selects, when
// its selectors name both (k8s:ns and k8s:sa, once each), whatever other
// selectors it has: unlike ShapeOf, it tells the account of an entry whose
// pods the pod cache cannot judge. It is the key of a PodShape's Namespace
// and ServiceAccount joined by "/".
func AccountOf(e *Entry) (string, bool) {
	ns, sa, ok := AccountParts(e)
	if !ok {
		return "", false
	}
	return ns + "/" + sa, true
}

// AccountParts is AccountOf as its two parts, the namespace and the
// service account; it allocates nothing.
func AccountParts(e *Entry) (namespace, serviceAccount string, ok bool) {
	var nsCount, saCount int
	for _, sel := range e.Selectors {
		if sel.Type != "k8s" {
			continue
		}
		if v, found := strings.CutPrefix(sel.Value, "ns:"); found {
			namespace, nsCount = v, nsCount+1
		}
		if v, found := strings.CutPrefix(sel.Value, "sa:"); found {
			serviceAccount, saCount = v, saCount+1
		}
	}
	if nsCount != 1 || saCount != 1 {
		return "", "", false
	}
	return namespace, serviceAccount, true
}

// MatchesPod reports whether the pod with the given UID and labels (in the
// shape's namespace and service account) is selected by the shape.
func (sh PodShape) MatchesPod(uid string, podLabels labels.Labels) bool {
	return (sh.PodUID == "" || sh.PodUID == uid) && sh.Matches(podLabels)
}

// Matches reports whether a pod with the given labels (in the shape's
// namespace and service account) is selected by the shape's labels; it
// does not check PodUID (see MatchesPod).
func (sh PodShape) Matches(podLabels labels.Labels) bool {
	for k, v := range sh.Labels {
		if got, ok := podLabels.Lookup(k); !ok || got != v {
			return false
		}
	}
	return true
}

// NarrowsNoMoreThan reports whether every narrowing selector of sh is one
// of other's too, so that any pod an entry of other's shape serves, an
// entry of sh's serves as well when it matches the pod's labels: what the
// pod cache cannot judge (containers, images) is then asked of it by both.
func (sh PodShape) NarrowsNoMoreThan(other PodShape) bool {
	for _, v := range sh.Narrowing {
		if !slices.Contains(other.Narrowing, v) {
			return false
		}
	}
	return true
}

// narrowing reports whether a k8s selector value is of a type the shape
// leaves out: one about a pod's containers, images, owner or node.
func narrowing(value string) bool {
	typ, _, _ := strings.Cut(value, ":")
	switch typ {
	case "container-name", "container-image", "pod-owner", "pod-owner-uid", "pod-image", "pod-init-image",
		"pod-image-count", "pod-init-image-count", "node-name":
		return true
	}
	return false
}
