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

// sampleOverlap says, for the samples at or over the pth percentile and
// for all of them, how many something (the operator's status writes, its
// garbage collections) overlapped: ran while they ran, or started within
// grace after their end.
type sampleOverlap struct {
	// what names the events and what they did, say "status writes landed".
	what                 string
	p                    int
	events               int
	tail, tailWith       int
	samples, samplesWith int
	grace                time.Duration
}

// instants turns points in time into spans of no length.
func instants(at []time.Time) []span {
	out := make([]span, len(at))
	for i, t := range at {
		out[i] = span{from: t, to: t}
	}
	return out
}

// overlapSamples counts the samples that one of events overlapped, among
// all and among those at or over the pth percentile of their times. An
// event overlaps a sample when it runs at some time from the sample's
// start to grace after its end. Status writes are given a grace because
// the API server announces a write only when it is done, so a write
// announced just after a sample ended was being handled while it ran.
func overlapSamples(what string, windows []sampleWindow, events []span, p int, grace time.Duration) sampleOverlap {
	o := sampleOverlap{what: what, p: p, events: len(events), samples: len(windows), grace: grace}
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
		hit := len(within(events, w.start, w.start.Add(w.took+grace))) > 0
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
func (o sampleOverlap) String() string {
	after := ""
	if o.grace > 0 {
		after = fmt.Sprintf(" or within %s after it", o.grace)
	}
	return fmt.Sprintf("%d %s during the samples; one overlapped a sample%s in %d of the %d samples at or over the p%d, and in %d of all %d",
		o.events, o.what, after, o.tailWith, o.tail, o.p, o.samplesWith, o.samples)
}

// tailClause is the part of String about the tail alone, for a second
// percentile in the same line.
func (o sampleOverlap) tailClause() string {
	return fmt.Sprintf("in %d of the %d at or over the p%d", o.tailWith, o.tail, o.p)
}
