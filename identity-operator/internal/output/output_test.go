package output

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNameIsDeterministicUniqueAndShort(t *testing.T) {
	if Name("team-a", "llm") != Name("team-a", "llm") {
		t.Fatal("Name is not deterministic")
	}
	if Name("a-b", "c") == Name("a", "b-c") {
		t.Fatal("Name does not tell a-b/c from a/b-c")
	}
	if suffix := Name("team-a", "llm")[len("team-a-llm-"):]; len(suffix) != 16 || strings.Trim(suffix, "0123456789abcdef") != "" {
		t.Fatalf("Name %q does not end in 64 bits of hash (16 hex digits)", Name("team-a", "llm"))
	}
	if !strings.HasPrefix(Name("team-a", "llm"), "team-a-llm-") {
		t.Fatalf("Name %q does not start with <namespace>-<name>-", Name("team-a", "llm"))
	}
	long := Name(strings.Repeat("n", 63), strings.Repeat("b", 253))
	if len(long) > 63 {
		t.Fatalf("Name %q is longer than 63", long)
	}
	if errs := validation.IsDNS1123Subdomain(long); len(errs) > 0 {
		t.Fatalf("Name %q is not a valid object name: %v", long, errs)
	}
	if errs := validation.IsValidLabelValue(long); len(errs) > 0 {
		t.Fatalf("Name %q is not a valid label value: %v", long, errs)
	}
	if Name(strings.Repeat("n", 63), strings.Repeat("b", 253)) == Name(strings.Repeat("n", 63), strings.Repeat("b", 252)) {
		t.Fatal("truncated names collide")
	}
}

func TestParseKinds(t *testing.T) {
	if k, err := ParseKinds([]string{"spiffeentry", " ClusterSPIFFEID"}); err != nil || len(k) != 2 {
		t.Fatalf("ParseKinds = %v, %v", k, err)
	}
	for _, bad := range [][]string{nil, {"x"}, {"spiffeentry", "spiffeentry"}} {
		if _, err := ParseKinds(bad); err == nil {
			t.Errorf("ParseKinds(%v) accepted", bad)
		}
	}
}
