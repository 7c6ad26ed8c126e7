package trigger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// Poller is a manager.Runnable that sends a GenericEvent for every
// TrustBundle whose inputs changed since the last poll.
type Poller struct {
	// Client lists TrustBundles (from the cache).
	Client client.Reader
	// Sources computes the revision of ConfigMap and Secret sources.
	Sources *source.Resolver
	// Spire reads SPIRE bundles; nil when SPIRE is not configured.
	Spire spire.Reader
	// Interval between polls.
	Interval time.Duration
	// Events receives the TrustBundles to reconcile.
	Events chan<- event.TypedGenericEvent[*v1alpha1.TrustBundle]
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Start polls until ctx ends.
func (p *Poller) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("trigger")
	st := newPollState()
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := p.poll(logf.IntoContext(ctx, log), st); err != nil {
			log.Error(err, "poll")
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader reconciles, so only the leader polls.
func (p *Poller) NeedLeaderElection() bool { return true }

// pollState is what one poll remembers for the next, by TrustBundle name.
type pollState struct {
	// revision of the inputs at the last poll.
	revision map[string]string
	// fired is the deadline that last requeued the TrustBundle: while its
	// sources fail the status, and so the deadline, does not change, and
	// it must not requeue on every poll.
	fired map[string]time.Time
}

func newPollState() *pollState {
	return &pollState{revision: map[string]string{}, fired: map[string]time.Time{}}
}

func (p *Poller) poll(ctx context.Context, st *pollState) error {
	last := st.revision
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	var list v1alpha1.TrustBundleList
	if err := p.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("list TrustBundles: %w", err)
	}
	federated := false
	for i := range list.Items {
		federated = federated || usesFederation(&list.Items[i])
	}
	spireRev := p.spireRevision(ctx, federated)
	seen := map[string]bool{}
	for i := range list.Items {
		tb := &list.Items[i]
		seen[tb.Name] = true
		rev, err := p.Sources.Revision(ctx, tb.Spec.Sources)
		if err != nil {
			// The revision "unreadable" requeues the bundle once its
			// sources can be read again.
			logf.FromContext(ctx).Error(err, "read the revision of the sources", "trustBundle", tb.Name)
			rev = "unreadable"
		}
		if usesSpire(tb) {
			rev = spireRev + "|" + rev
		}
		prev, known := last[tb.Name]
		last[tb.Name] = rev
		deadline := trustbundle.NextDeadline(tb)
		due := !deadline.IsZero() && !now.Before(deadline) && !st.fired[tb.Name].Equal(deadline)
		if due {
			st.fired[tb.Name] = deadline
		}
		// A first sighting triggers too: the change may have happened
		// between the TrustBundle's last reconcile and this poll.
		if !known || prev != rev || due {
			logf.FromContext(ctx).V(1).Info("inputs changed", "trustBundle", tb.Name, "due", due)
			select {
			case p.Events <- event.TypedGenericEvent[*v1alpha1.TrustBundle]{Object: tb}:
			case <-ctx.Done():
				return nil
			}
		}
	}
	for name := range last {
		if !seen[name] {
			delete(last, name)
			delete(st.fired, name)
		}
	}
	return nil
}

// spireRevision summarises the SPIRE bundles: each one's sequence number
// and a digest of its authorities (which also catches a change that did not
// bump the sequence number). Federated bundles are listed only when a
// TrustBundle asks for them: listing them needs admin rights that reading
// the server's own bundle does not.
func (p *Poller) spireRevision(ctx context.Context, federated bool) string {
	if p.Spire == nil {
		return "none"
	}
	// The revision "unavailable" requeues the bundles with a spire source
	// once SPIRE answers again.
	own, err := p.Spire.ServerBundle(ctx)
	if err != nil {
		logf.FromContext(ctx).Error(err, "read the SPIRE server's bundle")
		return "unavailable"
	}
	parts := []string{revisionOf(own)}
	if federated {
		fed, err := p.Spire.FederatedBundles(ctx)
		if err != nil {
			logf.FromContext(ctx).Error(err, "read the SPIRE server's federated bundles")
			return "unavailable"
		}
		for _, b := range fed {
			parts = append(parts, revisionOf(b))
		}
		slices.Sort(parts[1:])
	}
	return strings.Join(parts, ",")
}

func revisionOf(b *spire.Bundle) string {
	h := sha256.New()
	for _, der := range b.X509Authorities {
		h.Write(der)
	}
	for _, k := range b.JWTAuthorities {
		h.Write([]byte(k.KeyID))
		h.Write(k.PublicKey)
	}
	return fmt.Sprintf("%s=%d/%x", b.TrustDomain, b.SequenceNumber, h.Sum(nil)[:8])
}

func usesFederation(tb *v1alpha1.TrustBundle) bool {
	for _, s := range tb.Spec.Sources {
		if s.SPIRE != nil && len(s.SPIRE.FederatedTrustDomains) > 0 {
			return true
		}
	}
	return false
}

func usesSpire(tb *v1alpha1.TrustBundle) bool {
	for _, s := range tb.Spec.Sources {
		if s.SPIRE != nil {
			return true
		}
	}
	return false
}
