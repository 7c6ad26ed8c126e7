package condition

import (
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestAdversarialCutNeverExceedsTheLimitNorSplitsACharacter: for any valid UTF-8
// message and any limit, Cut returns at most limit bytes (none for a
// negative limit), valid UTF-8, starting with a whole-character prefix of the
// message, and the message itself when it fits.
func TestAdversarialCutNeverExceedsTheLimitNorSplitsACharacter(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	alphabet := []string{"a", "é", "€", "𝄞", " ", "\"", "\\", "\x01"}
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		n := r.Intn(3000)
		for b.Len() < n {
			b.WriteString(alphabet[r.Intn(len(alphabet))])
		}
		m := b.String()
		limit := r.Intn(3100) - 20
		if i%7 == 0 {
			limit = r.Intn(40) // around the note's length
		}
		got := Cut(m, limit)
		switch {
		case len(m) <= limit:
			if got != m {
				t.Fatalf("Cut(%d bytes, %d) changed a message that fits", len(m), limit)
			}
		case len(got) > max(limit, 0):
			t.Fatalf("Cut(%d bytes, %d) = %d bytes", len(m), limit, len(got))
		case !utf8.ValidString(got):
			t.Fatalf("Cut(%d bytes, %d) split a character", len(m), limit)
		}
		prefix, _, _ := strings.Cut(got, " ... (")
		if !strings.HasPrefix(m, prefix) {
			t.Fatalf("Cut(%d bytes, %d) does not start with the message", len(m), limit)
		}
	}
}

// TestAdversarialCutAtTheFailureLimitKeepsTheFieldAndSaysWhatWasCut: a
// 1 KiB-cut failure message still names the field it starts with and says
// how much was cut.
func TestAdversarialCutAtTheFailureLimitKeepsTheFieldAndSaysWhatWasCut(t *testing.T) {
	m := "spec.spiffeIDTemplate: renders " + strings.Repeat("€", 100000)
	got := Cut(m, 1024)
	if !strings.HasPrefix(got, "spec.spiffeIDTemplate: ") || !strings.HasSuffix(got, " bytes cut)") || len(got) > 1024 {
		t.Errorf("Cut = %q... (%d bytes)", got[:40], len(got))
	}
}
