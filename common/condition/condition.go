// Package condition holds the two conditions every Trustplane object carries:
// Processing (what the controller is doing) and Ready (whether the object is
// in its desired state). Both are metav1.Condition and follow kstatus, so
// `kubectl wait --for=condition=Ready` works.
package condition

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/object"
)

const (
	// TypeProcessing says what the controller is doing with the object.
	TypeProcessing = "Processing"
	// TypeReady says whether the object is in its desired state.
	TypeReady = "Ready"
)

const (
	// ReasonProcessing: the controller is working towards the desired state.
	ReasonProcessing = "Processing"
	// ReasonBlocked: progress waits on something outside the object.
	ReasonBlocked = "Blocked"
	// ReasonDone: the last pass finished without error.
	ReasonDone = "Done"
	// ReasonReady: the object is in its desired state.
	ReasonReady = "Ready"
	// ReasonNotReady: the object is not in its desired state (generic reason;
	// handlers should prefer a specific one).
	ReasonNotReady = "NotReady"
	// ReasonMissingEnvironment: the object has no environment label and no
	// default environment is configured.
	ReasonMissingEnvironment = "MissingEnvironmentLabel"
	// ReasonError: the last pass failed with an unclassified error.
	ReasonError = "ReconcileError"
)

// NewProcessing returns Processing=True with reason ReasonProcessing: the
// controller is working towards the desired state. Processing is True while
// work is in progress or blocked and False when done, as kstatus expects of
// an "in progress" condition; each of NewProcessing, NewBlocked and NewDone
// fixes its own status, so no reason string decides it.
func NewProcessing(message string) metav1.Condition {
	return metav1.Condition{Type: TypeProcessing, Status: metav1.ConditionTrue, Reason: ReasonProcessing, Message: message}
}

// NewBlocked returns Processing=True with reason ReasonBlocked: progress
// waits on something outside the object.
func NewBlocked(message string) metav1.Condition {
	return metav1.Condition{Type: TypeProcessing, Status: metav1.ConditionTrue, Reason: ReasonBlocked, Message: message}
}

// NewDone returns Processing=False with reason ReasonDone: the last pass
// finished without error.
func NewDone() metav1.Condition {
	return metav1.Condition{Type: TypeProcessing, Status: metav1.ConditionFalse, Reason: ReasonDone}
}

// NewReady returns Ready=True.
func NewReady(message string) metav1.Condition {
	return metav1.Condition{Type: TypeReady, Status: metav1.ConditionTrue, Reason: ReasonReady, Message: message}
}

// NewNotReady returns Ready=False with a reason a user can act on.
func NewNotReady(reason, message string) metav1.Condition {
	if reason == "" {
		reason = ReasonNotReady
	}
	return metav1.Condition{Type: TypeReady, Status: metav1.ConditionFalse, Reason: reason, Message: message}
}

// MaxMessageLength is the longest message a condition holds, in bytes:
// the API server refuses a message of more characters (metav1.Condition's
// validation), and with it the whole status write.
const MaxMessageLength = 32768

// Set adds or replaces the condition of c's type on obj, stamped with obj's
// current generation, its message made valid UTF-8 and cut to
// MaxMessageLength.
// LastTransitionTime is kept when the status did not change
// (meta.SetStatusCondition) and set to now when it did.
//
// A reason the API server would refuse (and with it the whole status
// write: a space, a leading digit, more than MaxReasonLength characters)
// is replaced by ReasonInvalid, and the message says which reason was
// given, so the condition still reaches the object and says what to fix.
//
// Likewise a type the API server would refuse (a space, say) is replaced by
// TypeInvalid, and a status other than True, False and Unknown by Unknown,
// the message quoting what was given.
func Set(obj object.Object, c metav1.Condition) {
	c.ObservedGeneration = obj.GetGeneration()
	meta.SetStatusCondition(&obj.CommonStatus().Conditions, repaired(c))
}

// Repair makes every condition of obj one the API server accepts, as Set
// does for the condition it sets: for conditions set another way
// (status.Common.SetCondition, an append), with a transition time where it
// has none. Of two conditions that end up of one type, one stays, in the
// place of the first: the first for Processing and Ready (the Controller's
// own, which Set updates in place), the later for any other type. The
// Controller repairs every object before it writes its status, so that no
// condition can make the whole write fail.
func Repair(obj object.Object) {
	conds := obj.CommonStatus().Conditions
	out := make([]metav1.Condition, 0, len(conds))
	for _, c := range conds {
		c = repaired(c)
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = metav1.Now()
		}
		i := slices.IndexFunc(out, func(o metav1.Condition) bool { return o.Type == c.Type })
		switch {
		case i < 0:
			out = append(out, c)
		case c.Type != TypeProcessing && c.Type != TypeReady:
			out[i] = c
		}
	}
	obj.CommonStatus().Conditions = out
}

// repaired returns c with a type, status, reason and message the API server
// accepts (see Set).
func repaired(c metav1.Condition) metav1.Condition {
	if !ValidType(c.Type) {
		c.Message = fmt.Sprintf("%s (the condition type given, %q, is no valid condition type)", c.Message, cutReason(c.Type))
		c.Type = TypeInvalid
	}
	switch c.Status {
	case metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown:
	default:
		c.Message = fmt.Sprintf("%s (the status given, %q, is none of True, False and Unknown)", c.Message, cutReason(string(c.Status)))
		c.Status = metav1.ConditionUnknown
	}
	if !ValidReason(c.Reason) {
		c.Message = fmt.Sprintf("%s (the reason given, %q, is no valid condition reason)", c.Message, cutReason(c.Reason))
		c.Reason = ReasonInvalid
	}
	c.Message = cutMessage(validMessage(c.Message))
	return c
}

// ReasonInvalid replaces a reason the API server would refuse (see Set).
const ReasonInvalid = "InvalidReason"

// TypeInvalid replaces a condition type the API server would refuse (see
// Set).
const TypeInvalid = "InvalidConditionType"

// maxTypeLength is the longest condition type, in characters
// (metav1.Condition's validation).
const maxTypeLength = 316

// typePattern is the pattern of a condition type in the schema of a CRD's
// metav1.Condition (what the API server checks of a custom resource):
// a name with an optional DNS subdomain prefix.
var typePattern = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`)

// ValidType reports whether the API server accepts t as the condition type
// of a custom resource: typePattern, at most maxTypeLength characters.
func ValidType(t string) bool {
	return len(t) <= maxTypeLength && typePattern.MatchString(t)
}

// MaxReasonLength is the longest reason a condition holds, in characters
// (metav1.Condition's validation).
const MaxReasonLength = 1024

// reasonPattern is metav1.Condition's pattern for a reason.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// ValidReason reports whether the API server accepts reason in a
// condition: CamelCase-like, at most MaxReasonLength characters.
func ValidReason(reason string) bool {
	return len(reason) <= MaxReasonLength && reasonPattern.MatchString(reason)
}

// cutReason returns at most the first 64 bytes of an invalid reason, for
// the message that quotes it.
func cutReason(r string) string {
	const keep = 64
	if len(r) <= keep {
		return r
	}
	return r[:wholeRunes(r, keep)] + "..."
}

// wholeRunes returns the length of the longest prefix of s that is whole
// characters and at most n bytes (n < len(s)).
func wholeRunes(s string, n int) int {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// validMessage returns m with each byte that is not part of valid UTF-8
// replaced by U+FFFD, as the JSON encoding of a status write replaces it:
// otherwise the status read back never equals the one set, and every pass
// writes it again.
func validMessage(m string) string {
	if utf8.ValidString(m) {
		return m
	}
	var b strings.Builder
	for i := 0; i < len(m); {
		r, size := utf8.DecodeRuneInString(m[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(m[i : i+size])
		}
		i += size
	}
	return b.String()
}

// cutMessage returns m when it fits MaxMessageLength, else its beginning,
// cut at a character boundary, followed by how many bytes were cut.
func cutMessage(m string) string { return Cut(m, MaxMessageLength) }

// Cut returns m when it fits limit bytes, else its beginning, cut at a
// character boundary, followed by how many bytes were cut, limit bytes in
// all. A status message that quotes what a user wrote (an annotation, a
// rendered value) is cut with it, so that no input can grow the status
// past what the API server stores. A limit too small for the note gives
// the beginning alone.
func Cut(m string, limit int) string {
	if len(m) <= limit {
		return m
	}
	note := func(kept int) string { return fmt.Sprintf(" ... (%d bytes cut)", len(m)-kept) }
	if limit < len(note(0)) {
		return m[:wholeRunes(m, max(limit, 0))]
	}
	// Start with room for the longest note, then grow the prefix while the
	// note of the bytes it cuts, which gets no longer, leaves room.
	kept := wholeRunes(m, limit-len(note(0)))
	for {
		more := wholeRunes(m, limit-len(note(kept)))
		if more <= kept {
			return m[:kept] + note(kept)
		}
		kept = more
	}
}

// SetStatus is Set for a condition given by its parts: status True when ok.
func SetStatus(obj object.Object, conditionType string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	Set(obj, metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message})
}

// Find returns the condition of type t, or nil.
func Find(obj object.Object, t string) *metav1.Condition {
	return meta.FindStatusCondition(obj.CommonStatus().Conditions, t)
}

// IsReady reports whether obj is Ready=True for its current generation.
func IsReady(obj object.Object) bool {
	c := Find(obj, TypeReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.GetGeneration()
}
