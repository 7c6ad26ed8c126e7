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

// maskCheck watches one entry that masks an owner's entry: a foreign one,
// or ours held by an owner this process has not seen (another
// environment's, or one whose first pass has not come yet).
type maskCheck struct {
	owners []Owner
	parent string
	delay  time.Duration
	// timer runs the next check; s.mu guards it.
	timer *time.Timer
	// ctx is the context the watch began in, for checks run early.
	ctx context.Context
}

// watchMasking schedules a check of the entry id (under parent) that masks
// an entry of owner, unless one is scheduled; s.mu is held. When the
// entry is gone, the parent's view is re-read and owner passes again, so its
// own entry is created within seconds rather than at the next resync. While
// the entry stays, the checks back off to the resync interval, so a
// permanent foreign entry costs one GetEntry per resync.
func (s *Syncer) watchMasking(ctx context.Context, owner Owner, parent, id string) {
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
	c := &maskCheck{owners: []Owner{owner}, parent: parent, delay: s.maskRecheck(), ctx: ctx}
	s.masks[id] = c
	s.scheduleCheck(id, c)
}

// checkMasksNow runs every scheduled check of a masking entry at once,
// with its delay back at the start; s.mu is held. Forget calls it for an
// object this process never saw (another environment's, say), whose
// deletion may just have taken the entry that masks one of ours.
func (s *Syncer) checkMasksNow() {
	for id, c := range s.masks {
		if c.timer != nil && c.timer.Stop() {
			c.delay = s.maskRecheck()
			go s.check(id, c)
		}
	}
}

func (s *Syncer) maskRecheck() time.Duration {
	if s.opts.MaskRecheck > 0 {
		return s.opts.MaskRecheck
	}
	return DefaultMaskRecheck
}

// scheduleCheck runs the check of c after its delay; s.mu is held.
func (s *Syncer) scheduleCheck(id string, c *maskCheck) {
	c.timer = time.AfterFunc(c.delay, func() { s.check(id, c) })
}

// check looks whether the masking entry id still exists: while it does,
// the next check comes after twice the delay (up to the resync interval);
// once it is gone, the parent's view is re-read and the masked owners pass
// again.
func (s *Syncer) check(id string, c *maskCheck) {
	ctx := c.ctx
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
		s.scheduleCheck(id, c)
		s.mu.Unlock()
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
}
