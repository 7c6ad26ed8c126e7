package entrysync

import (
	"context"
	"errors"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// ErrNeedFullSync reports that SyncDelta cannot serve a change: the view of
// a parent is missing, invalid or due for a resync, or the owner has had no
// full Sync yet. The caller runs a full Sync instead.
var ErrNeedFullSync = errors.New("incremental sync not possible, a full sync is needed")

// SyncDelta is the incremental form of Sync: it changes only the given keys
// of what owner wants. want are entries owner now wants (new or changed;
// normalized, no duplicate keys), gone are entries it wanted before and no
// longer does. The entries owner holds under other keys are left alone, so
// the cost depends on the size of the change, not on how many entries owner
// holds. The Outcome covers the keys of want only.
//
// It needs a valid view no older than the resync interval of every parent
// involved and a full Sync of owner before it; otherwise it returns
// ErrNeedFullSync without calling SPIRE. Errors are those of Sync.
func (s *Syncer) SyncDelta(ctx context.Context, owner Owner, want, gone []*entries.Entry) (Outcome, error) {
	out := Outcome{Registered: make(map[entries.Key]string, len(want))}
	tag := owner.Tag()
	s.mu.Lock()
	if _, known := s.claims.byOwner[owner.UID]; !known {
		s.mu.Unlock()
		return out, ErrNeedFullSync
	}
	now := s.opts.Now()
	for _, list := range [][]*entries.Entry{want, gone} {
		for _, e := range list {
			if !s.views[e.ParentID.String()].fresh(now, s.opts.ResyncInterval) {
				s.mu.Unlock()
				return out, ErrNeedFullSync
			}
		}
	}
	if !s.recheckable(owner, now) {
		s.mu.Unlock()
		return out, ErrNeedFullSync
	}
	addKeys := make([]entries.Key, len(want))
	for i, e := range want {
		addKeys[i] = e.Key()
	}
	dropKeys := make([]entries.Key, len(gone))
	for i, e := range gone {
		dropKeys[i] = e.Key()
	}
	notify := append(s.dropPredecessor(owner), s.claims.change(owner, addKeys, dropKeys)...)

	p := &plan{}
	s.plans++
	mark := s.plans
	for i, e := range want {
		s.planEntry(ctx, p, owner, tag, mark, e, addKeys[i], &out)
	}
	r := retainer{s: s, ctx: ctx, owner: owner, p: p}
	for i, e := range gone {
		v := s.views[e.ParentID.String()]
		parent := e.ParentID.String()
		seen := ""
		if id, ok := v.byKey[dropKeys[i]]; ok {
			if o := v.ours[id]; o != nil && o.owner == tag && o.mark != mark {
				r.drop(parent, id, o, &out)
				seen = id
			}
		}
		// Our entry of this key, edited by hand into another key.
		if id := s.opts.IDs.EntryIDFor(tag, e); id != seen {
			if o := v.ours[id]; o != nil && o.owner == tag && o.mark != mark {
				r.drop(parent, id, o, &out)
			}
		}
	}
	s.recheck(&r, mark, &out)
	s.mu.Unlock()
	return s.finish(ctx, owner, notify, p, out)
}
