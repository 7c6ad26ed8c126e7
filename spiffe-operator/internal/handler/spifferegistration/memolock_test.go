package spifferegistration

import (
	"testing"
	"time"
)

// The first pass of a policy after a start reads its status records, and
// asks SPIRE about each (witness): up to a hundred calls. Other policies'
// passes must not wait for them: another policy's memo is handed out
// while the first policy's records are still being read.
func TestReadingOnePolicysRecordsHoldsUpNoOtherPolicy(t *testing.T) {
	var r renders
	reading, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		r.forPolicy("slow", 1, func() map[workloadKey]keptRecord {
			close(reading)
			<-release // SPIRE answers only once the other policy got its memo
			return nil
		})
	}()
	<-reading
	other := make(chan struct{})
	go func() {
		r.forPolicy("other", 1, func() map[workloadKey]keptRecord { return nil })
		close(other)
	}()
	select {
	case <-other:
	case <-time.After(10 * time.Second):
		t.Error("another policy's memo waited for the first policy's records to be read")
	}
	close(release)
	<-done
	<-other
}
