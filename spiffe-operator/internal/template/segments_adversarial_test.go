package template

import (
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// TestAdversarialATenantsValueNeverWritesMoreThanOneSegment: whatever a pod's
// annotation or label holds, the ID keeps the template's segments: no
// '/', encoded slash, dot segment or control byte yields an ID of another
// namespace or service account.
func TestAdversarialATenantsValueNeverWritesMoreThanOneSegment(t *testing.T) {
	tpl, err := ParsePod("ns/{namespace}/sa/{serviceAccount}/role/{annotation:example.com/role}")
	if err != nil {
		t.Fatal(err)
	}
	td := spiffeid.RequireTrustDomainFromString("example.org")
	for _, v := range []string{"a/../../../ns/victim/sa/admin", "..", ".", "%2F..%2Fvictim", "a\\b", "a\x00b", "x\u2215y", "a//b", " a", "A.B-c_d"} {
		path, err := tpl.Render(Values{Namespace: "tenant", ServiceAccount: "app", Annotations: map[string]string{"example.com/role": v}})
		if err != nil {
			continue
		}
		id, err := spiffeid.FromPath(td, "/"+path)
		if err != nil {
			continue
		}
		segs := strings.Split(strings.TrimPrefix(id.Path(), "/"), "/")
		if len(segs) != 6 || segs[0] != "ns" || segs[1] != "tenant" || segs[2] != "sa" || segs[3] != "app" || segs[4] != "role" {
			t.Errorf("value %q renders %s", v, id)
		}
	}
}
