package class

import "testing"

func TestTakes(t *testing.T) {
	for _, tc := range []struct {
		f      Filter
		object string
		want   bool
	}{
		{Filter{}, "", true},
		{Filter{}, "blue", false},
		{Filter{Name: "blue"}, "blue", true},
		{Filter{Name: "blue"}, "", false},
		{Filter{Name: "blue"}, "green", false},
		{Filter{Name: "blue", Classless: true}, "", true},
		{Filter{Name: "blue", Classless: true}, "green", false},
	} {
		if got := tc.f.Takes(tc.object); got != tc.want {
			t.Errorf("%+v.Takes(%q) = %v, want %v", tc.f, tc.object, got, tc.want)
		}
	}
}
