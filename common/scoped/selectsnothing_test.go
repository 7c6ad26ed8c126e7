package scoped_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/scoped"
)

// TestSelectsNothingTellsNothingFromEverything: a selector of nothing is
// sent as no selector, which selects everything; SelectsNothing must tell
// it apart from the selectors that select something, or all.
func TestSelectsNothingTellsNothingFromEverything(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []client.DeleteAllOfOption
		want bool
	}{
		{"no options", nil, false},
		{"labels.Nothing()", []client.DeleteAllOfOption{client.MatchingLabelsSelector{Selector: k8slabels.Nothing()}}, true},
		{"a nil Selector", []client.DeleteAllOfOption{client.MatchingLabelsSelector{}}, true},
		{"labels.Everything()", []client.DeleteAllOfOption{client.MatchingLabelsSelector{Selector: k8slabels.Everything()}}, false},
		{"matching labels", []client.DeleteAllOfOption{client.MatchingLabels{"tier": "cache"}}, false},
		{"nothing, then labels added", []client.DeleteAllOfOption{client.MatchingLabelsSelector{Selector: k8slabels.Nothing()}, client.MatchingLabels{"tier": "cache"}}, true},
		{"a namespace only", []client.DeleteAllOfOption{client.InNamespace("a")}, false},
		{"fields.Nothing()", []client.DeleteAllOfOption{client.MatchingFieldsSelector{Selector: fields.Nothing()}}, true},
		{"a nil field Selector", []client.DeleteAllOfOption{client.MatchingFieldsSelector{}}, true},
		{"fields.Everything()", []client.DeleteAllOfOption{client.MatchingFieldsSelector{Selector: fields.Everything()}}, false},
		{"matching fields", []client.DeleteAllOfOption{client.MatchingFields{"metadata.name": "a"}}, false},
	} {
		if got := scoped.SelectsNothing(tc.opts...); got != tc.want {
			t.Errorf("%s: SelectsNothing = %v, want %v", tc.name, got, tc.want)
		}
	}
}
