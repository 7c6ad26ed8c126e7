package entrysync

import (
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// ours is one of the operator's entries as last seen in SPIRE.
type ours struct {
	entry entries.Entry
	owner string // owner tag from the entry ID
	// mark is the number of the last plan that wanted the entry kept.
	mark uint64
}

// parentView is the in-memory view of the entries under one parent ID.
type parentView struct {
	// valid is false until the first successful list, and again after a
	// write whose outcome is unknown.
	valid    bool
	listedAt time.Time
	// ours holds the operator's entries by entry ID.
	ours map[string]*ours
	// byKey maps the key of each of our entries to its ID.
	byKey map[entries.Key]string
	// foreign maps the key of each entry the operator did not create to its ID.
	foreign map[entries.Key]string
	// held counts the entries of ours by owner tag.
	held map[string]int
	// journal, while SPIRE is read under the parent, records the writes
	// made meanwhile: the read may predate them, so they are replayed on
	// the view it makes (see Syncer.ensureListed).
	journal *viewJournal
}

// fresh reports whether v is a view a pass may trust without reading
// SPIRE again at now: listed successfully, not invalidated since, and
// younger than interval. A nil view is not fresh.
func (v *parentView) fresh(now time.Time, interval time.Duration) bool {
	return v != nil && v.valid && now.Sub(v.listedAt) < interval
}

// viewJournal is what was written under a parent while it was read.
type viewJournal struct {
	// ops are the entries put (put set) and removed (removed set), in order.
	ops []viewOp
	// invalid is set when a write's outcome became unknown.
	invalid bool
}

type viewOp struct {
	put     *types.Entry
	removed string
}

// replay applies the journal's writes to v, a view read while they were
// made. Each is idempotent: whether the read saw it or not, v ends as
// SPIRE is after it.
func (j *viewJournal) replay(ids entries.IDScheme, v *parentView) {
	for _, op := range j.ops {
		if op.put != nil {
			v.put(ids, op.put)
		} else {
			v.remove(op.removed)
		}
	}
	if j.invalid {
		v.valid = false
	}
}

// invalidate marks the view for a read at the next pass (a write's outcome
// is unknown, or a foreign entry changed).
func (v *parentView) invalidate() {
	v.valid = false
	if v.journal != nil {
		v.journal.invalid = true
	}
}

func newParentView() *parentView {
	return &parentView{ours: map[string]*ours{}, byKey: map[entries.Key]string{}, foreign: map[entries.Key]string{}, held: map[string]int{}}
}

// put records an entry SPIRE returned, as ours or as foreign by its ID.
func (v *parentView) put(ids entries.IDScheme, p *types.Entry) {
	if v.journal != nil {
		v.journal.ops = append(v.journal.ops, viewOp{put: p})
	}
	e, err := entries.FromProto(p)
	if err != nil {
		return
	}
	k := e.Key()
	tag, mine := ids.Owner(p.GetId())
	if !mine {
		v.foreign[k] = p.GetId()
		return
	}
	if old, ok := v.ours[p.GetId()]; ok {
		if oldKey := old.entry.Key(); v.byKey[oldKey] == p.GetId() {
			delete(v.byKey, oldKey)
		}
		v.held[old.owner]--
	}
	v.ours[p.GetId()] = &ours{entry: e, owner: tag}
	v.held[tag]++
	v.byKey[k] = p.GetId()
}

func (v *parentView) remove(id string) {
	if v.journal != nil {
		v.journal.ops = append(v.journal.ops, viewOp{removed: id})
	}
	if o, ok := v.ours[id]; ok {
		if k := o.entry.Key(); v.byKey[k] == id {
			delete(v.byKey, k)
		}
		delete(v.ours, id)
		if v.held[o.owner]--; v.held[o.owner] <= 0 {
			delete(v.held, o.owner)
		}
	}
}
