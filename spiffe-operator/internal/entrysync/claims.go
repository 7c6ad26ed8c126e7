package entrysync

import (
	"context"
	"strings"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// Owner is an object that wants entries: a SpiffeRegistration or a SpiffeEntry.
type Owner struct {
	// Kind of the object.
	Kind string
	// Name of the object (both kinds are cluster-scoped).
	Name string
	// UID of the object.
	UID k8stypes.UID
	// Created is the object's creation time; the oldest claimant wins.
	Created time.Time
	// NodeOfParent, for an owner whose entries hang under the agent of
	// each node, returns the node whose agent the parent ID names (known
	// false when it knows of none), and whether a node of today renders
	// that parent (current false for the parent of a node deleted or
	// re-created under a new UID, whose agent may still run under the old
	// ID until it attests again). Retention then keeps an entry no longer
	// wanted only for the pods its parent's agent can serve, and one under
	// a parent no longer current for its pods whatever is under the
	// node's new parent. Nil: any pod.
	NodeOfParent func(ctx context.Context, parent string) (node string, known, current bool)
	// Grants are what the owner grants its entries today. An entry of its
	// that SPIRE keeps without it being what the owner wants now (kept while
	// pods still run under it, held back until what replaces it lands, or
	// left in place by a refused update or a claimant that masks it) keeps
	// no grant beyond these: a withdrawn grant is withdrawn at once, even
	// where the identity stays. The zero value grants nothing.
	Grants entries.Grants
}

// bare returns o without what only its pass uses (NodeOfParent), for the
// records kept across passes: they must not keep a pass's state alive.
func (o Owner) bare() Owner {
	o.NodeOfParent = nil
	return o
}

// String names the owner for status messages.
func (o Owner) String() string { return o.Kind + "/" + o.Name }

// Tag is the owner's tag in entry IDs.
func (o Owner) Tag() string { return entries.OwnerTag(o.UID) }

// olderThan orders claimants: creation time, then UID, so every replica and
// every pass picks the same winner.
func (o Owner) olderThan(p Owner) bool {
	if !o.Created.Equal(p.Created) {
		return o.Created.Before(p.Created)
	}
	return strings.Compare(string(o.UID), string(p.UID)) < 0
}

// claims records which owners want which keys. The oldest claimant of a key
// wins it; the others are masked.
type claims struct {
	byKey   map[entries.Key][]Owner
	byOwner map[k8stypes.UID]map[entries.Key]struct{}
	// byTag holds every owner that has claims, by the tag of its entry IDs.
	byTag map[string]Owner
	// byName holds the owner that last had claims of each kind and name.
	byName map[string]Owner
	// since holds, by tag, the value of gen when the owner got its claims;
	// gen counts the owners that got claims.
	since map[string]uint64
	gen   uint64
}

func newClaims() *claims {
	return &claims{byKey: map[entries.Key][]Owner{}, byOwner: map[k8stypes.UID]map[entries.Key]struct{}{}, byTag: map[string]Owner{},
		byName: map[string]Owner{}, since: map[string]uint64{}}
}

// remember records o as an owner with claims.
func (c *claims) remember(o Owner) {
	tag := o.Tag()
	if _, ok := c.byTag[tag]; !ok {
		c.gen++
		c.since[tag] = c.gen
	}
	c.byTag[tag] = o
	c.byName[nameOf(o)] = o
}

// mark returns a mark of the owners with claims now: knownAt tells, of an
// owner, whether it had them at a mark.
func (c *claims) mark() uint64 { return c.gen }

// knownAt reports whether the owner tagged tag had claims at mark m (and
// still has).
func (c *claims) knownAt(tag string, m uint64) bool {
	g, ok := c.since[tag]
	return ok && g <= m
}

// nextHolder returns the oldest claimant of k for which skip is false.
func (c *claims) nextHolder(k entries.Key, skip func(Owner) bool) (Owner, bool) {
	return oldest(c.byKey[k], skip)
}

// nameOf is the key of o in claims.byName.
func nameOf(o Owner) string { return o.Kind + "/" + o.Name }

// predecessor returns the owner that had claims under o's kind and name
// and another UID.
func (c *claims) predecessor(o Owner) (Owner, bool) {
	p, ok := c.byName[nameOf(o)]
	return p, ok && p.UID != o.UID
}

// known returns the owner with the given tag when it has had a pass in this
// process (it has claims, possibly none), and whether it claims k.
func (c *claims) known(tag string, k entries.Key) (o Owner, ok, claimsK bool) {
	o, ok = c.byTag[tag]
	if !ok {
		return Owner{}, false, false
	}
	_, claimsK = c.byOwner[o.UID][k]
	return o, true, claimsK
}

// winner returns the oldest of cs, which must not be empty.
func winner(cs []Owner) Owner {
	w, _ := oldest(cs, nil)
	return w
}

// oldest returns the oldest of cs for which skip (when set) is false, and
// false when there is none.
func oldest(cs []Owner, skip func(Owner) bool) (Owner, bool) {
	var (
		w     Owner
		found bool
	)
	for _, o := range cs {
		if (skip == nil || !skip(o)) && (!found || o.olderThan(w)) {
			w, found = o, true
		}
	}
	return w, found
}

// set replaces the keys o claims and returns the other owners whose winner
// changed (they must reconcile again). An unchanged set costs no allocation.
// The owner known by its tag is o as of this call (its current grants).
func (c *claims) set(o Owner, keys []entries.Key) []Owner {
	o = o.bare()
	old, had := c.byOwner[o.UID]
	if had {
		c.remember(o)
	}
	if had && len(old) == len(keys) {
		same := true
		for _, k := range keys {
			if _, ok := old[k]; !ok {
				same = false
				break
			}
		}
		if same {
			return nil
		}
	}
	notify := map[k8stypes.UID]Owner{}
	want := make(map[entries.Key]struct{}, len(keys))
	for _, k := range keys {
		want[k] = struct{}{}
	}
	for k := range old {
		if _, ok := want[k]; !ok {
			c.drop(o, k, notify)
		}
	}
	for k := range want {
		if _, ok := old[k]; !ok {
			c.add(o, k, notify)
		}
	}
	c.byOwner[o.UID] = want
	c.remember(o)
	return flatten(notify, o)
}

// change adds the keys add to and drops the keys drop from those o claims,
// and returns the other owners whose winner changed. o must have claims
// already (a set before).
func (c *claims) change(o Owner, add, drop []entries.Key) []Owner {
	o = o.bare()
	mine := c.byOwner[o.UID]
	if mine == nil {
		mine = map[entries.Key]struct{}{}
		c.byOwner[o.UID] = mine
	}
	c.remember(o)
	notify := map[k8stypes.UID]Owner{}
	for _, k := range drop {
		if _, ok := mine[k]; ok {
			c.drop(o, k, notify)
			delete(mine, k)
		}
	}
	for _, k := range add {
		if _, ok := mine[k]; !ok {
			c.add(o, k, notify)
			mine[k] = struct{}{}
		}
	}
	return flatten(notify, o)
}

// winnerOf returns the oldest claimant of k.
func (c *claims) winnerOf(k entries.Key) (Owner, bool) {
	return oldest(c.byKey[k], nil)
}

// release drops every claim of o and returns the owners whose winner changed.
func (c *claims) release(o Owner) []Owner {
	notify := map[k8stypes.UID]Owner{}
	for k := range c.byOwner[o.UID] {
		c.drop(o, k, notify)
	}
	delete(c.byOwner, o.UID)
	delete(c.byTag, o.Tag())
	delete(c.since, o.Tag())
	if c.byName[nameOf(o)].UID == o.UID {
		delete(c.byName, nameOf(o))
	}
	return flatten(notify, o)
}

func (c *claims) add(o Owner, k entries.Key, notify map[k8stypes.UID]Owner) {
	cs := c.byKey[k]
	if len(cs) > 0 && o.olderThan(winner(cs)) {
		for _, x := range cs {
			notify[x.UID] = x
		}
	}
	c.byKey[k] = append(cs, o)
}

func (c *claims) drop(o Owner, k entries.Key, notify map[k8stypes.UID]Owner) {
	cs := c.byKey[k]
	wasWinner := len(cs) > 0 && winner(cs).UID == o.UID
	out := cs[:0]
	for _, x := range cs {
		if x.UID != o.UID {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		delete(c.byKey, k)
		return
	}
	c.byKey[k] = out
	if wasWinner {
		for _, x := range out {
			notify[x.UID] = x
		}
	}
}

func flatten(m map[k8stypes.UID]Owner, self Owner) []Owner {
	out := make([]Owner, 0, len(m))
	for uid, o := range m {
		if uid != self.UID {
			out = append(out, o)
		}
	}
	return out
}
