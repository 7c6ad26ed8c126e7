package entrysync

import (
	"context"
	"slices"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// DefaultMaskRecheck is how soon an entry masked by a foreign entry is
// checked again when Options.MaskRecheck is unset.
const DefaultMaskRecheck = 5 * time.Second

// maskCheck watches one foreign entry that masks an owner's entry.
type maskCheck struct {
	owners []Owner
	parent string
	delay  time.Duration
}

// watchForeign schedules a check of the foreign entry id (under parent) that
// masks an entry of owner, unless one is scheduled; s.mu is held. When the
// entry is gone, the parent's view is re-read and owner passes again, so its
// own entry is created within seconds rather than at the next resync. While
// the entry stays, the checks back off to the resync interval, so a
// permanent foreign entry costs one GetEntry per resync.
func (s *Syncer) watchForeign(ctx context.Context, owner Owner, parent, id string) {
	owner = owner.bare()
	if s.opts.MaskRecheck < 0 {
		return
	}
	if c, ok := s.masks[id]; ok {
		if !slices.ContainsFunc(c.owners, func(o Owner) bool { return o.UID == owner.UID }) {
			c.owners = append(c.owners, owner)
		}
		return
	}
	c := &maskCheck{owners: []Owner{owner}, parent: parent, delay: s.maskRecheck()}
	s.masks[id] = c
	s.scheduleCheck(ctx, id, c)
}

func (s *Syncer) maskRecheck() time.Duration {
	if s.opts.MaskRecheck > 0 {
		return s.opts.MaskRecheck
	}
	return DefaultMaskRecheck
}

func (s *Syncer) scheduleCheck(ctx context.Context, id string, c *maskCheck) {
	time.AfterFunc(c.delay, func() {
		if ctx.Err() != nil {
			s.mu.Lock()
			delete(s.masks, id)
			s.mu.Unlock()
			return
		}
		exists, err := s.api.Exists(ctx, id)
		if err != nil {
			logf.FromContext(ctx).V(1).Info("checking a masking entry", "entryID", id, "error", err.Error())
		}
		s.mu.Lock()
		if err != nil || exists {
			c.delay = min(2*c.delay, max(s.opts.ResyncInterval, s.maskRecheck()))
			s.mu.Unlock()
			s.scheduleCheck(ctx, id, c)
			return
		}
		delete(s.masks, id)
		if v := s.views[c.parent]; v != nil {
			v.invalidate()
		}
		s.mu.Unlock()
		for _, o := range c.owners {
			s.opts.Notify(o)
		}
	})
}
