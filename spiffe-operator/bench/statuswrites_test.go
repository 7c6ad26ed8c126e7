package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// statusWriteWatch records when the API server announced each change of
// one policy, through a watch of that object alone: while the samples run,
// the only writer of the policy is the operator's status write, so each
// change is one status write landing. The watch costs the API server one
// event per write, not a poll.
type statusWriteWatch struct {
	stop context.CancelFunc
	done chan struct{}

	mu sync.Mutex
	// at holds the arrival time of each change, in order.
	at []time.Time
	// err is why the watch ended early, if it did.
	err error
}

// watchStatusWrites starts watching the policy named name from its
// current resourceVersion, so that only changes after the call count.
func watchStatusWrites(ctx context.Context, k8s client.WithWatch, name, resourceVersion string) (*statusWriteWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w, err := k8s.Watch(ctx, &v1alpha1.SpiffeRegistrationList{}, &client.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name),
		Raw:           &metav1.ListOptions{ResourceVersion: resourceVersion},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch policy %s: %w", name, err)
	}
	s := &statusWriteWatch{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				now := time.Now()
				s.mu.Lock()
				switch {
				case !ok:
					s.err = fmt.Errorf("watch of policy %s closed early", name)
				case ev.Type == watch.Error:
					s.err = fmt.Errorf("watch of policy %s: %v", name, ev.Object)
				case ev.Type == watch.Modified:
					s.at = append(s.at, now)
				}
				failed := s.err != nil
				s.mu.Unlock()
				if failed {
					return
				}
			}
		}
	}()
	return s, nil
}

// close stops the watch and returns the changes' arrival times, or why
// the watch ended before it was stopped.
func (s *statusWriteWatch) close() ([]time.Time, error) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at), s.err
}

// sampleWindow is when one sample ran: from its Deployment's creation to
// its entry's commit.
type sampleWindow struct {
	start time.Time
	took  time.Duration
}

// statusWriteOverlap says, for the samples at or over the pth percentile
// and for all of them, how many had a status write land while they ran or
// within grace after their end (the API server announces a write only when
// it is done, so a write announced just after a sample ended was being
// handled while it ran).
type statusWriteOverlap struct {
	p                    int
	writes               int
	tail, tailWith       int
	samples, samplesWith int
	grace                time.Duration
}

// overlapStatusWrites counts the samples that a status write in writes
// overlapped, among all and among those at or over the pth percentile of
// their times.
func overlapStatusWrites(windows []sampleWindow, writes []time.Time, p int, grace time.Duration) statusWriteOverlap {
	o := statusWriteOverlap{p: p, writes: len(writes), samples: len(windows), grace: grace}
	if len(windows) == 0 {
		return o
	}
	took := make([]time.Duration, len(windows))
	for i, w := range windows {
		took[i] = w.took
	}
	slices.Sort(took)
	threshold := took[max(0, (len(took)*p+99)/100-1)]
	for _, w := range windows {
		end := w.start.Add(w.took + grace)
		hit := slices.ContainsFunc(writes, func(t time.Time) bool { return !t.Before(w.start) && !t.After(end) })
		if hit {
			o.samplesWith++
		}
		if w.took >= threshold {
			o.tail++
			if hit {
				o.tailWith++
			}
		}
	}
	return o
}

// String reads as a clause of the report.
func (o statusWriteOverlap) String() string {
	return fmt.Sprintf("%d status writes landed during the samples; one landed during a sample or within %s after it in %d of the %d samples at or over the p%d, and in %d of all %d",
		o.writes, o.grace, o.tailWith, o.tail, o.p, o.samplesWith, o.samples)
}

// tailClause is the part of String about the tail alone, for a second
// percentile in the same line.
func (o statusWriteOverlap) tailClause() string {
	return fmt.Sprintf("in %d of the %d at or over the p%d", o.tailWith, o.tail, o.p)
}
