package class

// Every class name an earlier release's CRDs admitted (pattern
// `^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`, including "a..b", whose lease name
// needs hashing: manager.InstanceName) must stay a class some instance can
// take: spec.className cannot be changed, so an object of a class no
// instance may have would keep its finalizer and its SPIRE entries.

import (
	"regexp"
	"testing"
)

// oldNamePattern is spec.className's pattern in the earlier releases.
var oldNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

func TestObjectsOfEveryClassAnEarlierCRDAdmittedAreStillTaken(t *testing.T) {
	for _, name := range []string{"a..b", "a.-b", "a-.b", "blue..eu"} {
		if !oldNamePattern.MatchString(name) {
			t.Fatalf("%q: the old pattern refused it after all", name)
		}
		if err := ValidName(name); err != nil {
			// No instance can be started for the class; does any other take
			// its objects (to withdraw them, or to report them)?
			taken := false
			for _, f := range []Filter{{}, {Classless: true}, {Name: "a.b", Classless: true}} {
				taken = taken || f.Takes(name)
			}
			if !taken {
				t.Errorf("an object stored with className %q (admitted by the CRD before the upgrade) is taken by no instance after it: "+
					"--class-name=%s is refused (%v) and no other class takes it, so it keeps its finalizer and its SPIRE entries", name, name, err)
			}
		}
	}
}
