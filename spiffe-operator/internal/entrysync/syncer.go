package entrysync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	k8stypes "k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// ErrStale reports that SPIRE changed under a pass (an entry vanished
// between the read and the write); the view is re-read on the next pass.
var ErrStale = errors.New("SPIRE changed during the pass")

// ErrTransient reports that SPIRE failed some entries of a batch for a
// cause that may pass (Internal, Unavailable, Aborted, DeadlineExceeded);
// the view is re-read and the pass retried with backoff.
var ErrTransient = errors.New("SPIRE failed entries for a transient cause")

// ErrDeleteRefused reports that SPIRE answered a delete but refused some
// of its entries with a code that is not transient (FailedPrecondition,
// PermissionDenied on the entry, and the like): they stay in SPIRE, and
// the pass is retried with backoff.
var ErrDeleteRefused = errors.New("SPIRE refused to delete entries")

// ErrUnsettled reports that a release waits until every object that
// existed when the process started has had its first pass (see
// Options.HoldUntilSettled): one that wants an entry the released owner
// holds may not have told the Syncer yet, and would get no hand-over.
var ErrUnsettled = errors.New("waiting until every object that existed at startup has had its first pass, " +
	"so that each entry this object holds goes to the next object that wants it")

// ReasonEntryIDNotKept is the Failed.Reason of an entry SPIRE created under
// another ID than the one asked for (custom entry IDs need SPIRE 1.8 or
// later). The operator deletes such an entry at once, since it could not
// recognise it later.
const ReasonEntryIDNotKept = "EntryIDNotKept"

// ReasonEntryIDTaken is the Failed.Reason of an entry SPIRE refused to
// create because another entry, not of the same parent ID, SPIFFE ID and
// selectors, already has its entry ID. The operator leaves that entry
// alone: it was not made for this key, whatever its ID says.
const ReasonEntryIDTaken = "EntryIDTaken"

// OwnReason reports whether reason is one the syncer words itself
// (ReasonEntryIDNotKept, ReasonEntryIDTaken, ReasonFederatedBundleMissing)
// rather than a code SPIRE answered: such a reason says what to fix, so a
// handler reports it as it is.
func OwnReason(reason string) bool {
	switch reason {
	case ReasonEntryIDNotKept, ReasonEntryIDTaken, ReasonFederatedBundleMissing:
		return true
	}
	return false
}

// Options configure a Syncer.
type Options struct {
	// IDs makes and reads the IDs of the operator's entries.
	IDs entries.IDScheme
	// ResyncInterval is how old the view of a parent may grow before a pass
	// reads SPIRE again.
	ResyncInterval time.Duration
	// Notify asks for another pass of an owner whose claims changed because
	// of another owner (it won or lost an entry). It must not block.
	Notify func(Owner)
	// Alive returns the tags of every owner that still exists; entries of
	// other owners (an object removed while the operator was down) are
	// deleted after each read of SPIRE. Nil disables this collection.
	Alive func(ctx context.Context) (map[string]bool, error)
	// AliveNow is Alive read from the source rather than a cache: before
	// entries are deleted as orphans, their owners are looked up again with
	// it, so an object too new for the cache keeps its entries. Nil trusts
	// Alive.
	AliveNow func(ctx context.Context) (map[string]bool, error)
	// Pods reads the existing pods, so that an entry no longer wanted stays
	// while a pod that needed it when it stopped being wanted still does
	// (Outcome.Retained); call PodsChanged when pods go or change labels.
	// Nil deletes entries as soon as they are no longer wanted.
	Pods PodLister
	// Recheck asks for another pass of an owner that keeps entries for pods
	// in a namespace whose pods changed (PodsChanged). The pass may be an
	// incremental one: SyncDelta judges those entries again, with or
	// without other changes. It must not block; nil means Notify.
	Recheck func(Owner)
	// MaskRecheck is how soon an entry masked by a foreign entry is checked
	// again (doubling up to ResyncInterval while it stays); 0 means
	// DefaultMaskRecheck, a negative value leaves it to the resync.
	MaskRecheck time.Duration
	// Now returns the time; nil means time.Now.
	Now func() time.Time
	// HoldUntilSettled makes Release return ErrUnsettled, for an owner that
	// holds entries, and orphan collection delete nothing, until Settle is
	// called. A fresh process knows the claims of an object only from its
	// first pass: a holder released (or collected) before the first pass
	// of the object that wants its entry next would have its entry deleted
	// and nothing created in its place until that pass came.
	HoldUntilSettled bool
}

// Syncer converges SPIRE's entries towards what owners want. It is safe for
// concurrent passes of different owners.
type Syncer struct {
	api  spire.EntryAPI
	opts Options

	mu     sync.Mutex
	views  map[string]*parentView
	claims *claims
	// listing serialises reads of one parent.
	listing map[string]*sync.Mutex
	// plans numbers plans, for the keep marks on entries.
	plans uint64
	// retained are the entries kept only for pods that still run, by ID.
	retained map[string]retention
	// withdrawn holds, for each of the entries this process found no longer
	// wanted, by ID, the UIDs of the pods that needed it then: only they
	// may keep it.
	withdrawn map[string]map[string]bool
	// masks are the scheduled checks of foreign entries that mask ours, by ID.
	masks map[string]*maskCheck
	// renamed are the entries to delete that SPIRE created under IDs of its
	// own at this syncer's request (or put back for an owner released
	// meanwhile), whose delete failed: nobody else would delete them. Each
	// has the tag of the owner whose pass made it.
	renamed map[deletion]string
	// renamedTried is when the deletes of renamed were last tried.
	renamedTried time.Time
	// releasing counts the Release calls in progress, by owner tag.
	releasing map[string]int
	// found holds, by owner tag, the parents under which CollectEverywhere
	// found entries of a live owner that no view had read: parents the
	// owner's recorded ones may lack (a status write lost before a
	// restart). The owner's next full Sync, or its Release, reads them; the
	// owners with claims are notified, for a full pass.
	found map[string]map[string]spiffeid.ID
	// podsChanged holds, by owner UID, the namespaces in which the owner
	// keeps entries for pods and whose pods changed since its last plan.
	podsChanged map[k8stypes.UID]map[string]struct{}
	// settled is false until Settle when Options.HoldUntilSettled is set.
	settled bool
	// waiting holds, by tag, the owners whose Release returned ErrUnsettled;
	// Settle asks for their passes.
	waiting map[string]Owner
}

// New returns a Syncer writing through api.
func New(api spire.EntryAPI, opts Options) *Syncer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Notify == nil {
		opts.Notify = func(Owner) {}
	}
	if opts.Recheck == nil {
		opts.Recheck = opts.Notify
	}
	return &Syncer{api: api, opts: opts, views: map[string]*parentView{}, claims: newClaims(), listing: map[string]*sync.Mutex{},
		retained: map[string]retention{}, withdrawn: map[string]map[string]bool{}, masks: map[string]*maskCheck{},
		renamed:   map[deletion]string{},
		releasing: map[string]int{}, found: map[string]map[string]spiffeid.ID{}, podsChanged: map[k8stypes.UID]map[string]struct{}{},
		settled: !opts.HoldUntilSettled, waiting: map[string]Owner{}}
}

// Settle ends the hold of Options.HoldUntilSettled: every object that
// existed at startup has had its first pass, so the claims on every entry
// are known. The owners whose release waited are asked for a pass.
func (s *Syncer) Settle() {
	s.mu.Lock()
	s.settled = true
	waiting := slices.Collect(maps.Values(s.waiting))
	s.waiting = map[string]Owner{}
	s.mu.Unlock()
	s.notifyAll(waiting)
}

// Settled reports whether deletions run (see Options.HoldUntilSettled).
func (s *Syncer) Settled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settled
}

// Masked is a wanted entry that another holder has.
type Masked struct {
	// Entry is the wanted entry.
	Entry entries.Entry
	// By names the holder: an owner ("SpiffeRegistration/a") or an entry ID.
	By string
	// Foreign is true when the holder is an entry this operator did not create.
	Foreign bool
}

// Failed is a wanted entry SPIRE refused.
type Failed struct {
	// Entry is the wanted entry.
	Entry entries.Entry
	// Reason is the gRPC code name, e.g. InvalidArgument.
	Reason string
	// Message is SPIRE's message.
	Message string
}

// Outcome is what one pass achieved for one owner.
type Outcome struct {
	// Registered maps the key of each wanted entry the owner holds to its entry ID.
	Registered map[entries.Key]string
	// Masked are wanted entries held by an older owner or a foreign entry.
	Masked []Masked
	// Failed are wanted entries SPIRE refused.
	Failed []Failed
	// Retained counts entries the owner no longer wants but keeps, because
	// an existing pod matches them and no wanted entry does (a Deployment's
	// old ReplicaSet after a service account change, a workload whose
	// render fails after a restart). They go once no pod needs them.
	Retained int
	// HeldBack counts entries the owner no longer wants but keeps because
	// SPIRE refused to create the entries meant to replace them. They are
	// in no one's wanted set, so only a full pass finds them again: a
	// caller that runs incremental passes makes its next pass a full one.
	HeldBack int
	// Talked is true when the pass called SPIRE.
	Talked bool
	// Parents are the parent IDs under which owner may hold entries after
	// the pass, sorted. Callers record them (in status) and pass them back
	// as Sync's also, so a parent that is no longer wanted is still read
	// after a restart and its entries are deleted.
	Parents []string
	// Rechecked are the parents of the entries kept for pods that a
	// SyncDelta judged again (see PodsChanged): a caller bringing its
	// record of parents up to date counts them as touched.
	Rechecked []spiffeid.ID
}

// Sync makes SPIRE hold want for owner: want must be normalized and free of
// duplicate keys. also are the parent IDs owner may have entries under
// besides those of want (the Outcome.Parents of its last pass, which may
// name a parent the spec used before a restart): they are read too, and
// owner's entries there are deleted. It returns an error when SPIRE could
// not be read or written; nothing is lost then, the next pass re-reads
// SPIRE and resumes.
func (s *Syncer) Sync(ctx context.Context, owner Owner, want []*entries.Entry, also []spiffeid.ID) (out Outcome, err error) {
	out = Outcome{Registered: make(map[entries.Key]string, len(want))}
	given := slices.Clip(also)
	for _, e := range want {
		given = append(given, e.ParentID)
	}
	parents, talked, err := s.readHeld(ctx, owner, given)
	out.Talked = talked
	defer func() { out.Parents = s.heldParents(owner, parents, err != nil) }()
	if err != nil {
		return out, err
	}

	keys := make([]entries.Key, len(want))
	for i := range want {
		keys[i] = want[i].Key()
	}
	s.mu.Lock()
	notify := append(s.dropPredecessor(owner), s.claims.set(owner, keys)...)
	p := s.plan(ctx, owner, want, keys, &out)
	s.mu.Unlock()
	return s.finish(ctx, owner, notify, p, out)
}

// finish tells the owners whose claims changed, then runs the plan's writes.
// It is called without the lock held.
func (s *Syncer) finish(ctx context.Context, owner Owner, notify []Owner, p *plan, out Outcome) (Outcome, error) {
	for _, o := range notify {
		s.opts.Notify(o)
	}
	for _, o := range p.notify {
		s.opts.Notify(o)
	}
	// The entries SPIRE renamed whose delete failed before: this owner's
	// are reported by its pass.
	renameErr := s.deleteRenamed(ctx, owner.Tag(), nil, true)
	if p.empty() {
		return out, renameErr
	}
	out.Talked = true
	return out, errors.Join(s.execute(ctx, owner, p, &out), renameErr)
}

// deleteRenamed deletes del, entries SPIRE created under IDs of its own at
// the request of the pass of the owner tagged tag (or put back, or handed
// over, for an owner released meanwhile). One whose delete fails is kept.
// With pending (once a pass), it also tries again the kept entries of tag,
// and, after renamedRetry, silently, those of every owner. It reports the
// failures of del and of tag's kept entries: another owner's entry that
// SPIRE will not delete fails no pass but that owner's.
func (s *Syncer) deleteRenamed(ctx context.Context, tag string, del []deletion, pending bool) error {
	now := s.opts.Now()
	s.mu.Lock()
	for _, d := range del {
		s.renamed[d] = tag
	}
	earlier := pending && now.Sub(s.renamedTried) >= renamedRetry
	if earlier {
		s.renamedTried = now
	}
	// This owner's in one request, the others' in another, so that
	// SPIRE refusing a request for another owner's entry fails no pass
	// of this one.
	mine, others := del, []deletion(nil)
	if pending {
		mine = nil
	}
	for d, by := range s.renamed {
		switch {
		case by == tag && pending:
			mine = append(mine, d)
		case by != tag && earlier:
			others = append(others, d)
		}
	}
	s.mu.Unlock()
	forget := func(tried []deletion) error {
		if len(tried) == 0 {
			return nil
		}
		gone, err := s.deleteEach(ctx, tried)
		s.mu.Lock()
		for i, d := range tried {
			if gone[i] {
				delete(s.renamed, d)
			}
		}
		s.mu.Unlock()
		return err
	}
	if err := forget(others); err != nil {
		logf.FromContext(ctx).V(1).Info("entries SPIRE created under IDs of its own are still there; tried again later", "error", err.Error())
	}
	if err := forget(mine); err != nil {
		return fmt.Errorf("delete entries SPIRE created under IDs of its own (tried again at the next pass): %w", err)
	}
	return nil
}

// renamedRetry is the least time between two tries of the deletes that
// deleteRenamed keeps.
const renamedRetry = time.Minute

// Release deletes every entry owner holds, under the given parents and any
// other parent the view knows, and hands its claims to the next owners.
func (s *Syncer) Release(ctx context.Context, owner Owner, parents []spiffeid.ID) error {
	if _, _, err := s.readHeld(ctx, owner, parents); err != nil {
		return err
	}
	s.mu.Lock()
	var (
		del  []deletion
		held []entries.Entry
	)
	tag := owner.Tag()
	for parent, v := range s.views {
		for id, o := range v.ours {
			if o.owner == tag {
				del = append(del, deletion{parent: parent, id: id})
				held = append(held, o.entry)
			}
		}
	}
	if !s.settled && len(del) > 0 {
		s.waiting[tag] = owner
		s.mu.Unlock()
		return ErrUnsettled
	}
	// Until its claims go, a put-back of one of its entries (see putBack)
	// must take the owner as released: this release read the view under
	// this lock and would not see an entry put back while it deletes.
	s.releasing[tag]++
	defer func() {
		s.mu.Lock()
		if s.releasing[tag]--; s.releasing[tag] <= 0 {
			delete(s.releasing, tag)
		}
		s.mu.Unlock()
	}()
	s.mu.Unlock()
	gone, err := s.deleteEach(ctx, del)
	var deleted []entries.Entry
	for i := range del {
		if gone[i] {
			deleted = append(deleted, held[i])
		}
	}
	s.mu.Lock()
	var notify []Owner
	if err == nil {
		notify = s.dropClaims(owner)
	}
	// After a failure the owner keeps its claims until a release
	// succeeds, but what did go is handed over now, past the owner (it
	// is releasing).
	next := s.handOver(deleted)
	s.mu.Unlock()
	s.createFor(ctx, next)
	s.notifyAll(notify)
	return err
}

// dropClaims drops every claim of owner and what is retained for it, and
// returns the owners whose winner changed. Call it with s.mu held.
func (s *Syncer) dropClaims(owner Owner) []Owner {
	notify := s.claims.release(owner)
	s.forgetRetained(owner)
	return notify
}

// dropPredecessor drops the claims of the owner that had owner's kind and
// name under another UID, and returns the owners whose winner changed.
// That object is gone: both kinds are cluster-scoped, so a name stands for
// one object at a time, and owner's pass read owner from the cache. Its
// Forget may never come (the name was taken again before the controller
// saw it gone). Call it with s.mu held.
func (s *Syncer) dropPredecessor(owner Owner) []Owner {
	prev, ok := s.claims.predecessor(owner)
	if !ok || s.releasing[prev.Tag()] > 0 {
		return nil
	}
	return s.dropClaims(prev)
}

// notifyAll asks for a pass of each owner of notify.
func (s *Syncer) notifyAll(notify []Owner) {
	for _, o := range notify {
		s.opts.Notify(o)
	}
}

// readHeld reads SPIRE under parents and under every other parent where
// owner is known to hold entries (the views', and those the startup
// listing found), where no fresh view has it. It returns those parents
// (also when a read failed) and whether it read SPIRE.
func (s *Syncer) readHeld(ctx context.Context, owner Owner, parents []spiffeid.ID) (all map[string]spiffeid.ID, talked bool, err error) {
	all = map[string]spiffeid.ID{}
	for _, p := range parents {
		all[p.String()] = p
	}
	for _, p := range s.parentsOf(owner) {
		all[p.String()] = p
	}
	found := s.foundFor(owner)
	for k, p := range found {
		all[k] = p
	}
	for _, p := range all {
		listed, err := s.ensureListed(ctx, p, false)
		talked = talked || listed
		if err != nil {
			return all, talked, err
		}
	}
	s.forgetFound(owner, found)
	return all, talked, nil
}

// handOver returns, for each entry a released owner held whose key another
// owner claims, that entry under the ID of the key's new winner; s.mu is
// held. SPIRE refuses two identical entries, so the next holder's entry can
// only be created once the released one is deleted: creating it right
// after, in the same call, keeps the gap to one SPIRE round trip. What the
// released owner granted beyond the identity (admin, downstream, DNS names,
// federated trust domains) does not pass on: a deleted policy's grant ends
// with it, even when SPIRE refuses the new holder's own fields. The new
// holder's next pass writes the fields it renders.
func (s *Syncer) handOver(held []entries.Entry) []handover {
	var out []handover
	for i := range held {
		e := &held[i]
		// An owner whose release is under way is passed over: an entry
		// created for it would be deleted again.
		w, ok := s.claims.nextHolder(e.Key(), func(o Owner) bool { return s.releasing[o.Tag()] > 0 })
		if !ok {
			continue
		}
		v := s.views[e.ParentID.String()]
		if v == nil {
			// Not read in this process: the next holder's pass reads it.
			continue
		}
		if _, taken := v.byKey[e.Key()]; taken {
			continue
		}
		if _, taken := v.foreign[e.Key()]; taken {
			continue
		}
		bare := e.WithoutGrants()
		out = append(out, handover{entry: bare.Proto(s.opts.IDs.EntryIDFor(w.Tag(), e)), holder: w.Tag(), key: e.Key()})
	}
	return out
}

// handover is an entry created for the next holder of its key.
type handover struct {
	entry *types.Entry
	// holder is the tag of the owner it is created for.
	holder string
	key    entries.Key
}

// createFor creates hand-over entries and records those SPIRE created; a
// failure is left to the new holder's pass, which it is notified of anyway.
// An entry whose holder was released while the create was in flight is
// deleted again: that release read the view before the entry was in it.
func (s *Syncer) createFor(ctx context.Context, next []handover) {
	if len(next) == 0 {
		return
	}
	in := make([]*types.Entry, len(next))
	for i, h := range next {
		in[i] = h.entry
	}
	res, err := s.api.Create(ctx, in)
	if err != nil {
		logf.FromContext(ctx).V(1).Info("handing entries over; the new holders' passes retry", "error", err.Error())
	}
	// renamed are the entries to delete again, by the tag of the holder
	// they were made for (whose passes report a failed delete).
	renamed := map[string][]deletion{}
	s.mu.Lock()
	for i, r := range res {
		switch {
		case r.Code != codes.OK:
		case r.Entry.GetId() != in[i].Id:
			// As in execute: an entry SPIRE renamed would leak.
			renamed[next[i].holder] = append(renamed[next[i].holder], deletion{parent: parentOf(in[i]), id: r.Entry.GetId()})
		case !s.claimedBy(next[i].holder, next[i].key):
			renamed[next[i].holder] = append(renamed[next[i].holder], deletion{parent: parentOf(in[i]), id: r.Entry.GetId()})
		default:
			if v := s.views[parentOf(in[i])]; v != nil {
				v.put(s.opts.IDs, r.Entry)
			}
		}
	}
	s.mu.Unlock()
	for holder, del := range renamed {
		if err := s.deleteRenamed(ctx, holder, del, false); err != nil {
			logf.FromContext(ctx).Error(err, "deleting entries SPIRE created under other IDs")
		}
	}
}

// parentOf returns the parent ID of p as a string, the key of its view
// (empty when p does not convert).
func parentOf(p *types.Entry) string {
	if e, err := entries.FromProto(p); err == nil {
		return e.ParentID.String()
	}
	return ""
}

// parentsOf returns the parents under which the view holds owner's entries.
func (s *Syncer) parentsOf(owner Owner) []spiffeid.ID {
	tag := owner.Tag()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []spiffeid.ID
	for parent, v := range s.views {
		if v.held[tag] > 0 {
			if id, err := spiffeid.FromString(parent); err == nil {
				out = append(out, id)
			}
		}
	}
	return out
}

// ParseParents parses the parent IDs an object's status recorded from
// Outcome.Parents (and any extra ones, such as the spec's), for Sync's also
// and Release. Unparsable values are skipped: the
// operator wrote them, and a hand-edited status must not block deletion.
func ParseParents(recorded []string, extra ...string) []spiffeid.ID {
	out := make([]spiffeid.ID, 0, len(recorded)+len(extra))
	for _, s := range append(slices.Clip(recorded), extra...) {
		if id, err := spiffeid.FromString(s); err == nil {
			out = append(out, id)
		}
	}
	return out
}

// heldParents returns, sorted, the parents under which owner holds entries
// after a pass that read the parents in considered. After a failed pass it
// keeps all of considered: what SPIRE holds there is not known for sure.
func (s *Syncer) heldParents(owner Owner, considered map[string]spiffeid.ID, failed bool) []string {
	set := map[string]bool{}
	for _, p := range s.parentsOf(owner) {
		set[p.String()] = true
	}
	if failed {
		for p := range considered {
			set[p] = true
		}
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// HeldParentsAfter returns recorded (the Outcome.Parents of owner's last
// pass) brought up to date after a SyncDelta whose entries were under the
// parents in touched: each of those stays or is added when owner holds an
// entry there now, and goes otherwise; after a failed SyncDelta (failed)
// all of touched stay, as heldParents keeps what a failed pass considered:
// a create may have landed unanswered. Every parent under which the views
// hold an entry of owner's stays too, so a record that missed a pass (its
// status write was lost) loses none. Its cost grows with touched and the
// number of parents read, not with the entries anyone holds.
func (s *Syncer) HeldParentsAfter(owner Owner, recorded []string, touched []spiffeid.ID, failed bool) []string {
	tag := owner.Tag()
	s.mu.Lock()
	same := s.recordStands(tag, recorded, touched, failed)
	s.mu.Unlock()
	if same {
		// Most passes leave the record as it is: say so without a copy.
		return recorded
	}
	set := make(map[string]bool, len(recorded)+len(touched))
	for _, p := range recorded {
		set[p] = true
	}
	s.mu.Lock()
	for key, v := range s.views {
		if v.held[tag] > 0 {
			set[key] = true
		}
	}
	for _, p := range touched {
		key := p.String()
		v := s.views[key]
		set[key] = failed || v != nil && v.held[tag] > 0
	}
	s.mu.Unlock()
	out := make([]string, 0, len(set))
	for p, held := range set {
		if held {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// recordStands reports whether HeldParentsAfter would return recorded as
// it is: recorded is sorted without repeats, names every parent under
// which the views hold an entry of the owner tagged tag, and each touched
// parent is in it exactly when it stays. It allocates nothing; s.mu is
// held.
func (s *Syncer) recordStands(tag string, recorded []string, touched []spiffeid.ID, failed bool) bool {
	for i := 1; i < len(recorded); i++ {
		if recorded[i-1] >= recorded[i] {
			return false
		}
	}
	in := func(key string) bool {
		_, found := slices.BinarySearch(recorded, key)
		return found
	}
	for key, v := range s.views {
		if v.held[tag] > 0 && !in(key) {
			return false
		}
	}
	for _, p := range touched {
		key := p.String()
		v := s.views[key]
		if stays := failed || v != nil && v.held[tag] > 0; stays != in(key) {
			return false
		}
	}
	return true
}

// ensureListed reads the entries under parent from SPIRE when the view is
// missing, invalid or older than the resync interval (or force is set). It
// reports whether it called SPIRE.
func (s *Syncer) ensureListed(ctx context.Context, parent spiffeid.ID, force bool) (bool, error) {
	key := parent.String()
	s.mu.Lock()
	l := s.listing[key]
	if l == nil {
		l = &sync.Mutex{}
		s.listing[key] = l
	}
	s.mu.Unlock()
	l.Lock()
	defer l.Unlock()

	s.mu.Lock()
	v := s.views[key]
	fresh := v.fresh(s.opts.Now(), s.opts.ResyncInterval)
	s.mu.Unlock()
	if fresh && !force {
		return false, nil
	}
	started := s.opts.Now()
	// Other passes may write under parent while it is read; the view
	// records those writes, to replay them on the new one.
	s.mu.Lock()
	if v = s.views[key]; v != nil {
		v.journal = &viewJournal{}
	}
	s.mu.Unlock()
	list, err := s.api.ListByParent(ctx, parent)
	if err != nil {
		s.mu.Lock()
		if v != nil {
			v.journal = nil
		}
		s.mu.Unlock()
		return true, err
	}
	nv := newParentView()
	for _, e := range list {
		nv.put(s.opts.IDs, e)
	}
	nv.valid, nv.listedAt = true, started
	s.mu.Lock()
	if v != nil {
		// Replayed and installed under one lock: no write falls between.
		v.journal.replay(s.opts.IDs, nv)
		v.journal = nil
		// Entries of ours that went from SPIRE without the operator (by
		// hand) leave no record behind.
		for id := range v.ours {
			if nv.ours[id] == nil {
				delete(s.withdrawn, id)
				delete(s.retained, id)
			}
		}
	}
	s.views[key] = nv
	ours := len(nv.ours) // read under the lock: writes of other passes update the view
	s.mu.Unlock()
	logf.FromContext(ctx).V(1).Info("read SPIRE entries", "parentID", key, "entries", len(list), "ours", ours)
	return true, s.collect(ctx, key)
}

// collect deletes entries under parent whose owner no longer exists; it
// does nothing until the Syncer is settled (Options.HoldUntilSettled): the
// next read of the parent after that collects.
func (s *Syncer) collect(ctx context.Context, parent string) error {
	if s.opts.Alive == nil || !s.Settled() {
		return nil
	}
	mark := s.claimsMark()
	alive, err := s.opts.Alive(ctx)
	if err != nil {
		return fmt.Errorf("list owners for garbage collection: %w", err)
	}
	var (
		del  []deletion
		held = map[string]entries.Entry{}
	)
	s.mu.Lock()
	for id, o := range s.views[parent].ours {
		if !alive[o.owner] {
			del = append(del, deletion{parent: parent, id: id})
			held[id] = o.entry
		}
	}
	s.mu.Unlock()
	if del, alive, err = s.confirmOrphans(ctx, del, alive); err != nil {
		return err
	}
	if len(del) > 0 {
		logf.FromContext(ctx).Info("deleting entries of owners that no longer exist", "parentID", parent, "entries", len(del))
	}
	return s.deleteOrphans(ctx, del, held, alive, mark)
}

// claimsMark returns the mark of the owners with claims now: an owner that
// had them at a mark taken before a read of the live owners, and that the
// read lacks, is gone.
func (s *Syncer) claimsMark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims.mark()
}

// deleteOrphans deletes del, entries of owners confirmed gone (held gives
// the entry of each ID, where known; alive is the set of live owners the
// confirmation read, after mark was taken), and then does what a release
// of those owners does: drops the claims of every owner that had claims at
// mark and that alive lacks (one that got them since may have been created
// after that read), hands each deleted entry over to the live owner that
// wins its key now, in the same call, and asks for a pass of the owners
// whose winner changed. An owner gone without its release (a finalizer
// removed by hand) would otherwise keep masking the next claimant of its
// keys after its entries went, and that claimant's pods would have no
// entry until the operator restarted; and an owner gone the same way that
// had not held the entry would be handed it.
func (s *Syncer) deleteOrphans(ctx context.Context, del []deletion, held map[string]entries.Entry, alive map[string]bool, mark uint64) error {
	if len(del) == 0 {
		return nil
	}
	gone, err := s.deleteEach(ctx, del)
	var next []entries.Entry
	for i, d := range del {
		if e, ok := held[d.id]; ok && gone[i] {
			next = append(next, e)
		}
	}
	s.mu.Lock()
	var notify []Owner
	for tag, o := range s.claims.byTag {
		if !alive[tag] && s.claims.knownAt(tag, mark) && s.releasing[tag] == 0 {
			notify = append(notify, s.dropClaims(o)...)
		}
	}
	handovers := s.handOver(next)
	s.mu.Unlock()
	s.createFor(ctx, handovers)
	s.notifyAll(notify)
	return err
}

// Forget drops the claims of the owners of kind and name, which are gone
// from the cache whether or not their release ran (a finalizer removed by
// hand skips it), asks for a pass of the owners that win their keys now,
// and returns the owners it dropped. Their entries stay until orphan
// collection confirms the owner gone and hands them over (see
// deleteOrphans); until then they serve the pods they served, and the
// next claimant reports its entry masked. Forgetting an object this
// process never saw (another instance's) checks at once every entry that
// masks one of ours: that instance may just have deleted it.
func (s *Syncer) Forget(kind, name string) []Owner {
	s.mu.Lock()
	var dropped, notify []Owner
	for tag, o := range s.claims.byTag {
		if o.Kind != kind || o.Name != name || s.releasing[tag] > 0 {
			continue
		}
		dropped = append(dropped, o)
		notify = append(notify, s.dropClaims(o)...)
	}
	if len(dropped) == 0 {
		// An object this process never saw (another environment's): its
		// instance may just have deleted an entry that masks ours.
		s.checkMasksNow()
	}
	s.mu.Unlock()
	s.notifyAll(notify)
	return dropped
}

// noteFound records, of the parents under which a full listing found
// entries of each live owner (by tag), those no view has read, and returns
// the owners with a claim in this process among them, whose passes must
// read those parents (owners without one read them at their first pass).
func (s *Syncer) noteFound(live map[string]map[string]spiffeid.ID) []Owner {
	s.mu.Lock()
	defer s.mu.Unlock()
	var notify []Owner
	for tag, parents := range live {
		added := false
		for k, id := range parents {
			if v := s.views[k]; v != nil && v.valid {
				continue
			}
			if s.found[tag] == nil {
				s.found[tag] = map[string]spiffeid.ID{}
			}
			s.found[tag][k], added = id, true
		}
		if o, ok := s.claims.byTag[tag]; ok && added {
			notify = append(notify, o)
		}
	}
	return notify
}

// foundFor returns a copy of the parents CollectEverywhere found owner's
// entries under that no view had read.
func (s *Syncer) foundFor(owner Owner) map[string]spiffeid.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.found[owner.Tag()])
}

// forgetFound drops, once they are read, the found parents of owner that
// foundFor returned.
func (s *Syncer) forgetFound(owner Owner, read map[string]spiffeid.ID) {
	if len(read) == 0 {
		return
	}
	tag := owner.Tag()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range read {
		delete(s.found[tag], k)
	}
	if len(s.found[tag]) == 0 {
		delete(s.found, tag)
	}
}

// CollectEverywhere deletes the entries, under any parent ID, whose owner no
// longer exists; it reads every entry of the server once. Collection after
// each read of a parent only reaches parents some object still uses; this
// reaches the parents of objects removed while the operator was down that
// no other object uses. It does nothing when Options.Alive is nil, and
// returns ErrUnsettled until the Syncer is settled.
func (s *Syncer) CollectEverywhere(ctx context.Context) (int, error) {
	if s.opts.Alive == nil {
		return 0, nil
	}
	if !s.Settled() {
		return 0, ErrUnsettled
	}
	mark := s.claimsMark()
	list, err := s.api.ListAll(ctx)
	if err != nil {
		return 0, err
	}
	alive, err := s.opts.Alive(ctx)
	if err != nil {
		return 0, fmt.Errorf("list owners for garbage collection: %w", err)
	}
	var del []deletion
	held := map[string]entries.Entry{}
	live := map[string]map[string]spiffeid.ID{}
	for _, e := range list {
		tag, ours := s.opts.IDs.Owner(e.GetId())
		switch {
		case !ours:
		case alive[tag]:
			if id, err := entries.ParentIDOf(e); err == nil {
				if live[tag] == nil {
					live[tag] = map[string]spiffeid.ID{}
				}
				live[tag][id.String()] = id
			}
		default:
			del = append(del, deletion{parent: parentOf(e), id: e.GetId()})
			if en, err := entries.FromProto(e); err == nil {
				held[e.GetId()] = en
			}
		}
	}
	for _, o := range s.noteFound(live) {
		s.opts.Notify(o)
	}
	if del, alive, err = s.confirmOrphans(ctx, del, alive); err != nil {
		return 0, err
	}
	if len(del) > 0 {
		logf.FromContext(ctx).Info("deleting entries of owners that no longer exist, under every parent", "entries", len(del))
	}
	return len(del), s.deleteOrphans(ctx, del, held, alive, mark)
}

// confirmOrphans returns the entries of del whose owner AliveNow does not
// find either, and the live owners as AliveNow read them (cached, as given,
// when it reads nothing): a cache may not have caught up with an object
// whose entries another process (the previous leader) already created, and
// SPIRE was read before this lookup, so every owner of a listed entry
// exists in it.
func (s *Syncer) confirmOrphans(ctx context.Context, del []deletion, cached map[string]bool) ([]deletion, map[string]bool, error) {
	if len(del) == 0 || s.opts.AliveNow == nil {
		return del, cached, nil
	}
	alive, err := s.opts.AliveNow(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("confirm orphans: %w", err)
	}
	out := del[:0]
	for _, d := range del {
		if tag, _ := s.opts.IDs.Owner(d.id); !alive[tag] {
			out = append(out, d)
		}
	}
	return out, alive, nil
}

type deletion struct {
	parent string
	id     string
}

type update struct {
	entry *entries.Entry
	id    string
	mask  *types.EntryMask
	// trim is true for an update that only withdraws grants from an entry
	// kept without being wanted (see trimmed): it registers nothing.
	trim bool
	// probe is true for the update of another owner's entry to the fields
	// of the owner taking it over (see takeOver): one that fails leaves the
	// entry as its holder has it, grants included.
	probe bool
}

// trimmed returns the update that withdraws from have, our entry id, every
// grant beyond g, and false when have carries none. An entry that stays
// without being what its owner wants now keeps its identity this way, but
// no grant the owner has withdrawn since.
func trimmed(have *entries.Entry, id string, g entries.Grants) (update, bool) {
	t := have.Within(g)
	m := entries.UpdateMask(&t, have)
	if m == nil {
		return update{}, false
	}
	return update{entry: &t, id: id, mask: m, trim: true}, true
}

// takeover is an entry of another owner's (held) that the plan deletes so
// that by, which has its key, can be created in its place.
type takeover struct {
	deletion
	held entries.Entry
	by   *entries.Entry
	// holder is the tag of the owner of held; withdrawn and retained are
	// its records of held when held is kept only for pods (see retainer),
	// restored if held is put back.
	holder    string
	withdrawn map[string]bool
	retained  *retention
}

type plan struct {
	// tag is the tag of the owner whose pass runs the plan.
	tag string
	// notify are owners to ask for another pass.
	notify    []Owner
	takeovers []takeover
	creates   []*entries.Entry
	updates   []update
	stale     []deletion
}

func (p *plan) empty() bool {
	return len(p.takeovers)+len(p.creates)+len(p.updates)+len(p.stale) == 0
}

// plan compares want with the view; s.mu is held. Entries of owner's that
// want no longer has are deleted, unless an existing pod still needs them
// (see retainer).
func (s *Syncer) plan(ctx context.Context, owner Owner, want []*entries.Entry, keys []entries.Key, out *Outcome) *plan {
	p := &plan{}
	tag := owner.Tag()
	s.plans++
	mark := s.plans
	for i := range want {
		s.planEntry(ctx, p, owner, tag, mark, want[i], keys[i], out)
	}
	s.forgetRetained(owner)
	r := retainer{s: s, ctx: ctx, owner: owner, p: p}
	for parent, v := range s.views {
		for id, o := range v.ours {
			if o.owner == tag && o.mark != mark {
				r.drop(parent, id, o, out)
			}
		}
	}
	slices.SortFunc(p.stale, func(a, b deletion) int { return compare(a.id, b.id) })
	return p
}

// planEntry adds to p what it takes for owner to hold e (key k); s.mu is
// held. Entries of owner's that e keeps are marked with mark.
//
// An entry of another of our owners is taken over only when that owner is
// known to this process (it had a pass) and is younger, or no longer wants
// the entry. An owner not seen yet (after a restart or a leader change, the
// older holder's first pass may come after ours) keeps its entry: owner
// reports it masked and is told to pass again when the holder turns out
// younger. So a restart never deletes and re-creates a shared entry.
func (s *Syncer) planEntry(ctx context.Context, p *plan, owner Owner, tag string, mark uint64, e *entries.Entry, k entries.Key, out *Outcome) {
	if len(s.withdrawn) > 0 {
		// Wanted again: a later withdrawal starts afresh.
		delete(s.withdrawn, s.opts.IDs.EntryIDFor(tag, e))
	}
	v := s.views[e.ParentID.String()]
	if w, ok := s.claims.winnerOf(k); ok && w.UID != owner.UID {
		out.Masked = append(out.Masked, Masked{Entry: *e, By: w.String()})
		// Keep an entry we still hold until the winner takes it over, with
		// no grant e no longer makes, and tell the winner, which may have
		// found us unknown and waited.
		if id, ok := v.byKey[k]; ok && v.ours[id].owner == tag {
			v.ours[id].mark = mark
			if u, ok := trimmed(&v.ours[id].entry, id, e.Grants()); ok {
				p.updates = append(p.updates, u)
			}
			if !slices.ContainsFunc(p.notify, func(o Owner) bool { return o.UID == w.UID }) {
				p.notify = append(p.notify, w)
			}
		}
		return
	}
	if fid, ok := v.foreign[k]; ok {
		out.Masked = append(out.Masked, Masked{Entry: *e, By: "entry " + fid, Foreign: true})
		s.watchMasking(ctx, owner, e.ParentID.String(), fid)
		return
	}
	// Fast path: the view holds our entry under this key.
	if id, ok := v.byKey[k]; ok && s.opts.IDs.IsEntryIDFor(id, tag, e) {
		keep(p, out, v.ours[id], id, e, k, mark)
		return
	}
	myID := s.opts.IDs.EntryIDFor(tag, e)
	if have, ok := v.ours[myID]; ok {
		// Our entry, edited by hand into another key: restore it.
		keep(p, out, have, myID, e, k, mark)
		return
	}
	if id, ok := v.byKey[k]; ok && id != myID {
		if holder := v.ours[id].owner; holder != tag {
			if _, known, _ := s.claims.known(holder, k); !known {
				// Its owner has had no pass yet (or is gone, and orphan
				// collection deletes the entry), or is another
				// instance's (environment's): wait for it, and watch the
				// entry, so that owner passes again soon after whoever
				// holds it lets it go.
				out.Masked = append(out.Masked, Masked{Entry: *e, By: "the object owning entry " + id})
				s.watchMasking(ctx, owner, e.ParentID.String(), id)
				return
			}
		}
		// A younger owner holds it, or one that no longer wants it: take over.
		t := takeover{deletion: deletion{parent: e.ParentID.String(), id: id}, held: v.ours[id].entry, by: e,
			holder: v.ours[id].owner, withdrawn: s.withdrawn[id]}
		if r, ok := s.retained[id]; ok {
			t.retained = &r
		}
		p.takeovers = append(p.takeovers, t)
	}
	p.creates = append(p.creates, e)
}

// keep marks our entry have (ID id) as kept by the plan numbered mark and
// plans an update when it differs from e (key k); otherwise e is registered.
func keep(p *plan, out *Outcome, have *ours, id string, e *entries.Entry, k entries.Key, mark uint64) {
	have.mark = mark
	if m := entries.UpdateMask(e, &have.entry); m != nil {
		p.updates = append(p.updates, update{entry: e, id: id, mask: m})
		return
	}
	out.Registered[k] = id
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// execute runs the plan: takeovers, creates, updates, and only then the
// deletes of stale entries, so a workload never goes without an entry.
func (s *Syncer) execute(ctx context.Context, owner Owner, p *plan, out *Outcome) error {
	failedBefore := len(out.Failed)
	// retry is the error that makes the pass retry, for takeovers whose
	// deletes failed and for failedCreates, the creates SPIRE failed for
	// a cause that may pass.
	p.tag = owner.Tag()
	retry, err := s.takeOver(ctx, p, out)
	if err != nil {
		return err
	}
	var (
		failedCreates []Failed
		callErr       error // a create or update call that failed as a whole
	)
	if errors.Is(retry, errWholeCall) {
		// No entry was taken over; the pass goes on as after any call
		// that failed as a whole.
		callErr, retry = retry, nil
	}
	if len(p.creates) > 0 {
		in := make([]*types.Entry, len(p.creates))
		for i, e := range p.creates {
			in[i] = e.Proto(s.opts.IDs.EntryIDFor(p.tag, e))
		}
		res, err := s.api.Create(ctx, in)
		var renamed []deletion
		s.mu.Lock()
		for i, r := range res {
			e := p.creates[i]
			v := s.views[e.ParentID.String()]
			switch {
			case r.Code == codes.OK && r.Entry.GetId() != in[i].Id:
				// SPIRE ignored the entry ID asked for (custom IDs need SPIRE
				// 1.8 or later): the entry would look foreign and leak.
				// Delete it and say so.
				renamed = append(renamed, deletion{parent: e.ParentID.String(), id: r.Entry.GetId()})
				out.Failed = append(out.Failed, Failed{Entry: *e, Reason: ReasonEntryIDNotKept, Message: fmt.Sprintf(
					"SPIRE created the entry as %q, not as %q: it does not keep the entry IDs it is given (custom entry IDs need SPIRE 1.8 or later)",
					r.Entry.GetId(), in[i].Id)})
			case r.Code == codes.OK:
				v.put(s.opts.IDs, r.Entry)
				out.Registered[e.Key()] = r.Entry.GetId()
			case r.Code == codes.AlreadyExists:
				if r.Entry == nil {
					// SPIRE's datastore refused the entry ID itself: an
					// entry of another parent, SPIFFE ID or selectors
					// holds it, which no view of this pass need hold.
					v.invalidate()
					out.Failed = append(out.Failed, Failed{Entry: *e, Reason: ReasonEntryIDTaken, Message: fmt.Sprintf(
						"SPIRE already holds an entry with the ID %q this entry needs, for another parent ID, SPIFFE ID or selectors "+
							"(made by hand, or by another operator with this entry-ID prefix); delete that entry, or give this operator "+
							"its own entry-ID prefix (SPIRE said: %s)", in[i].Id, r.Message)})
					continue
				}
				v.put(s.opts.IDs, r.Entry)
				if r.Entry.GetId() == in[i].Id {
					out.Registered[e.Key()] = r.Entry.GetId()
				} else {
					_, ours := s.opts.IDs.Owner(r.Entry.GetId())
					out.Masked = append(out.Masked, Masked{Entry: *e, By: "entry " + r.Entry.GetId(), Foreign: !ours})
					if !ours {
						s.watchMasking(ctx, owner, e.ParentID.String(), r.Entry.GetId())
					}
				}
			case isRefusal(e, r, out):
			case isTransient(r.Code):
				// Whether it was created is not known: re-read, and retry.
				v.invalidate()
				failedCreates = append(failedCreates, Failed{Entry: *e, Reason: r.Code.String(), Message: r.Message})
			default:
				out.Failed = append(out.Failed, Failed{Entry: *e, Reason: r.Code.String(), Message: r.Message})
			}
		}
		s.mu.Unlock()
		// Delete what SPIRE renamed even when the call failed in part.
		renameErr := s.deleteRenamed(ctx, p.tag, renamed, false)
		// A put-back that fails is retried with the pass; the rest of the
		// pass (its updates and trims above all) goes on: the stale
		// entries of the accounts whose creates failed are held back.
		if err := s.putBack(ctx, p, in, res); err != nil {
			retry = errors.Join(retry, err)
		}
		if err != nil {
			// The call failed as a whole: SPIRE judged none of its
			// entries, whatever code they got above. The pass still makes
			// its updates and grant trims, so that a grant the policy
			// withdrew does not wait for SPIRE to take new entries, but
			// deletes and hands over nothing (below).
			callErr = fmt.Errorf("create %d entries: %w", len(in), err)
		}
		// A renamed entry whose delete failed is deleted at a later pass;
		// this one goes on and fails.
		retry = errors.Join(retry, renameErr)
		if len(failedCreates) > 0 {
			retry = errors.Join(retry, fmt.Errorf("create %d entries: %s: %w", len(failedCreates), describe(failedCreates), ErrTransient))
		}
	}
	// A refused update leaves its entry in place and replaces nothing.
	refused := out.Failed[failedBefore:]
	if err := s.updateAll(ctx, p.updates, out); err != nil {
		switch {
		case errors.Is(err, errWholeCall):
			callErr = errors.Join(callErr, err)
		case errors.Is(err, ErrTransient), callErr != nil:
			retry = errors.Join(retry, err)
		default:
			return errors.Join(retry, err)
		}
	}
	if callErr != nil {
		return s.afterFailedCall(ctx, owner, p, out, callErr, retry)
	}
	stale := p.stale
	if len(failedCreates) > 0 {
		stale = s.withoutAccountsOf(stale, failedCreates)
	}
	if len(refused) > 0 {
		stale = s.withoutReplaced(ctx, owner, stale, refused)
	}
	out.HeldBack = len(p.stale) - len(stale)
	if out.HeldBack > 0 {
		if err := s.updateAll(ctx, s.trimsOfHeldBack(owner, p.stale, stale), out); err != nil {
			retry = errors.Join(retry, err)
		}
	}
	return errors.Join(retry, s.deleteStale(ctx, stale))
}

// errWholeCall marks the error of a call SPIRE (or what stands between)
// failed as a whole.
var errWholeCall = errors.New("the call failed as a whole")

// afterFailedCall ends a pass in which a create or update call failed as a
// whole. Every entry to delete is held back, since its replacement may be
// among the entries SPIRE never judged, and nothing is handed over; the
// held-back entries are trimmed of the grants the pass withdrew. The error
// is the call's, so that the pass is reported as SPIRE's failure to answer
// (its gRPC code decides the reason), not as the entries' or a stale view's;
// the pass's other errors are named in its text.
func (s *Syncer) afterFailedCall(ctx context.Context, owner Owner, p *plan, out *Outcome, callErr, retry error) error {
	out.HeldBack = len(p.stale)
	if out.HeldBack > 0 {
		if err := s.updateAll(ctx, s.trimsOfHeldBack(owner, p.stale, nil), out); err != nil {
			retry = errors.Join(retry, err)
		}
	}
	if retry != nil {
		return fmt.Errorf("%w; the pass deleted no entry it no longer wants (also: %v)", callErr, retry)
	}
	return fmt.Errorf("%w; the pass deleted no entry it no longer wants", callErr)
}

// withoutAccountsOf leaves out of stale every entry of the namespaces and
// service accounts of the creates SPIRE failed for a cause that may pass
// (failed): the create may land at the next try, and until then the old
// entries of those accounts stay, whatever they select and whichever pods
// run (make-before-break). The rest goes on, so that an entry whose create
// keeps failing (one a tenant can make SPIRE's datastore fail every time,
// say) holds back nothing outside its own account. An entry whose account
// its selectors do not name (no k8s:ns and k8s:sa) is held back whenever
// any create failed, and every entry is when such a create failed.
func (s *Syncer) withoutAccountsOf(stale []deletion, failed []Failed) []deletion {
	accounts := map[string]bool{}
	for i := range failed {
		a, ok := entries.AccountOf(&failed[i].Entry)
		if !ok {
			return nil
		}
		accounts[a] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var remaining []deletion
	for _, d := range stale {
		v := s.views[d.parent]
		if v == nil || v.ours[d.id] == nil {
			continue
		}
		if a, ok := entries.AccountOf(&v.ours[d.id].entry); ok && !accounts[a] {
			remaining = append(remaining, d)
		}
	}
	return remaining
}

// describe names up to three failed entries and SPIRE's messages, for the
// error that says the pass failed.
func describe(failed []Failed) string {
	var parts []string
	for i, f := range failed {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(failed)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%s: %s %s", f.Entry.SpiffeID, f.Reason, f.Message))
	}
	return strings.Join(parts, "; ")
}

// takeOver deletes the entries the plan takes over. One whose fields
// differ from those of the entry replacing it is first updated to them, so
// SPIRE judges the new fields (a federated bundle it lacks, a DNS name it
// refuses) while the entry stays: a takeover SPIRE refuses that way is
// dropped with its create, the refusal reported, and the holder's entry
// left in place. An update that fails otherwise fails the pass before
// anything is deleted (err). A delete that fails drops that takeover and
// its create, the holder's entry still in place, and is returned as
// failed: the rest of the pass goes on, so the entries whose deletes did
// succeed are replaced at once, and creates that take nothing over do not
// wait behind a delete that keeps failing.
func (s *Syncer) takeOver(ctx context.Context, p *plan, out *Outcome) (failed, err error) {
	if len(p.takeovers) == 0 {
		return nil, nil
	}
	var probes []update
	for _, t := range p.takeovers {
		m := entries.UpdateMask(t.by, &t.held)
		if m == nil && len(t.by.FederatesWith) > 0 {
			// The same trust domains: SPIRE may have lost a bundle since.
			m = &types.EntryMask{FederatesWith: true}
		}
		if m != nil {
			probes = append(probes, update{entry: t.by, id: t.id, mask: m, probe: true})
		}
	}
	if len(probes) > 0 {
		probed := make(map[entries.Key]bool, len(probes))
		err := s.updateAll(ctx, probes, out)
		for _, u := range probes {
			// The entry is still the holder's until the create lands.
			k := u.entry.Key()
			probed[k] = out.Registered[k] == u.id
			delete(out.Registered, k)
		}
		if errors.Is(err, errWholeCall) {
			return s.dropTakeovers(p, err), nil
		}
		if err != nil && !errors.Is(err, ErrTransient) {
			return nil, err
		}
		// A probe SPIRE refused, or failed for a cause that may pass,
		// drops its takeover and the create behind it; the rest of the
		// pass goes on (a tenant's render that fails every time must not
		// stop the owner's other entries), and a passing cause is retried.
		failed = err
		dropped := func(k entries.Key) bool { ok, isProbe := probed[k]; return isProbe && !ok }
		p.takeovers = slices.DeleteFunc(p.takeovers, func(t takeover) bool { return dropped(t.by.Key()) })
		p.creates = slices.DeleteFunc(p.creates, func(e *entries.Entry) bool { return dropped(e.Key()) })
	}
	if len(p.takeovers) == 0 {
		return failed, nil
	}
	// A takeover deletes the holder's entry before its own create (SPIRE
	// keeps one entry per parent, SPIFFE ID and selectors). Ask SPIRE to
	// create the held entries as they are now (with the taker's fields,
	// which they have after the probes above, or had already), all in one
	// request, which it answers AlreadyExists and which changes nothing:
	// when it fails that call as a whole, it would fail the takeovers'
	// creates and the put-back (no larger) too, and nothing is deleted.
	held := make([]*types.Entry, len(p.takeovers))
	for i, t := range p.takeovers {
		held[i] = t.by.Proto(t.id)
	}
	res, err := s.api.Create(ctx, held)
	// An entry gone from SPIRE since the view was read is created again
	// by the probe; a SPIRE that does not keep the IDs it is given (before
	// 1.8) creates it under one of its own, which would be nobody's:
	// delete it, also when another request of the probe failed.
	var renamed []deletion
	for i, r := range res {
		if r.Code == codes.OK && r.Entry != nil && r.Entry.GetId() != held[i].Id {
			renamed = append(renamed, deletion{parent: p.takeovers[i].held.ParentID.String(), id: r.Entry.GetId()})
		}
	}
	if renameErr := s.deleteRenamed(ctx, p.tag, renamed, false); renameErr != nil {
		failed = errors.Join(failed, renameErr)
	}
	if err != nil {
		return errors.Join(failed, s.dropTakeovers(p, fmt.Errorf("create the %d entries to take over as they are, before taking them over: %w: %w",
			len(held), errWholeCall, err))), nil
	}
	// An entry SPIRE would not create as it is now (it refuses the taker's
	// fields, or fails them) could not be created after the delete either:
	// its takeover waits, and the holder keeps its entry. A refusal is the
	// taker's entry's, reported as any refused create; a failure that may
	// pass is retried.
	var failing []string
	waits := map[*entries.Entry]bool{}
	for i, r := range res {
		if r.Code == codes.OK || r.Code == codes.AlreadyExists {
			continue
		}
		t := p.takeovers[i]
		waits[t.by] = true
		if isTransient(r.Code) && !isRefusal(t.by, r, nil) {
			failing = append(failing, fmt.Sprintf("%s: %s %s", held[i].Id, r.Code, r.Message))
		} else if !isRefusal(t.by, r, out) {
			out.Failed = append(out.Failed, Failed{Entry: *t.by, Reason: r.Code.String(), Message: r.Message})
		}
	}
	p.withoutTakeovers(func(t takeover) bool { return waits[t.by] })
	if len(failing) > 0 {
		failed = errors.Join(failed, fmt.Errorf("take over %d entries: SPIRE failed them as they are, so they stay their holders' (%s): %w",
			len(failing), strings.Join(failing, "; "), ErrTransient))
	}
	if len(p.takeovers) == 0 {
		return failed, nil
	}
	del := make([]deletion, len(p.takeovers))
	for i, t := range p.takeovers {
		del[i] = t.deletion
	}
	gone, deleteErr := s.deleteEach(ctx, del)
	if deleteErr == nil {
		return failed, nil
	}
	kept := map[*entries.Entry]bool{}
	var done []takeover
	for i, t := range p.takeovers {
		if gone[i] {
			done = append(done, t)
		} else {
			kept[t.by] = true
		}
	}
	p.takeovers = done
	p.creates = slices.DeleteFunc(p.creates, func(e *entries.Entry) bool { return kept[e] })
	return errors.Join(failed, fmt.Errorf("take over: %w", deleteErr)), nil
}

// dropTakeovers drops every takeover of p and its create, after a call
// SPIRE failed as a whole (err, returned): the holders keep their entries.
func (s *Syncer) dropTakeovers(p *plan, err error) error {
	p.withoutTakeovers(func(takeover) bool { return true })
	return err
}

// withoutTakeovers drops the takeovers of p that drop names, and their
// creates.
func (p *plan) withoutTakeovers(drop func(takeover) bool) {
	dropped := map[*entries.Entry]bool{}
	p.takeovers = slices.DeleteFunc(p.takeovers, func(t takeover) bool {
		dropped[t.by] = drop(t)
		return dropped[t.by]
	})
	p.creates = slices.DeleteFunc(p.creates, func(e *entries.Entry) bool { return dropped[e] })
}

// putBack re-creates, with their IDs and fields, the entries taken over
// whose replacements did not land as asked (in were asked, res answers
// them; a call that failed as a whole may answer none), so a failed
// create never leaves the pods without the entry until a pass succeeds. A
// replacement that did land after all makes SPIRE answer AlreadyExists,
// which is fine. An entry whose owner was released meanwhile is not put
// back: its object is gone; one released while the put-back's create is
// in flight is deleted again once it lands, since that release could not
// see it. One put back gets its owner's records again.
func (s *Syncer) putBack(ctx context.Context, p *plan, in []*types.Entry, res []spire.Result) error {
	var (
		back []*types.Entry
		from []takeover
	)
	s.mu.Lock()
	for _, t := range p.takeovers {
		i := slices.Index(p.creates, t.by)
		if i >= 0 && i < len(res) && (res[i].Code == codes.OK && res[i].Entry.GetId() == in[i].Id || res[i].Code == codes.AlreadyExists) {
			continue
		}
		if !s.stillClaimed(t) {
			continue
		}
		// As it was, but for a grant its holder withdrew since the plan.
		holder, _, _ := s.claims.known(t.holder, t.by.Key())
		held := t.held.Within(holder.Grants)
		back = append(back, held.Proto(t.id))
		from = append(from, t)
	}
	s.mu.Unlock()
	if len(back) == 0 {
		return nil
	}
	// One request per entry, each no larger than the probe's request that
	// held it (the client groups what it is given by size, and a request
	// of several could pass a limit the probe's did not).
	answers := make([]spire.Result, len(back))
	var err error
	for i := range back {
		r, callErr := s.api.Create(ctx, back[i:i+1])
		if len(r) == 1 {
			answers[i] = r[0]
		} else {
			answers[i] = spire.Result{Code: status.Code(callErr), Message: fmt.Sprint(callErr)}
		}
		err = errors.Join(err, callErr)
	}
	var (
		failed []string
		notify []Owner
	)
	s.mu.Lock()
	// renamed are the entries to delete again: renamed by SPIRE, or of a
	// holder released meanwhile.
	var renamed []deletion
	for i, r := range answers {
		v := s.views[parentOf(back[i])]
		switch {
		case r.Code == codes.OK && r.Entry.GetId() != back[i].Id:
			// SPIRE ignored the ID, as it may have the create's: an entry
			// no owner could delete must not stay.
			renamed = append(renamed, deletion{parent: parentOf(back[i]), id: r.Entry.GetId()})
		case r.Code == codes.OK && !s.stillClaimed(from[i]):
			// The holder was released while the create was in flight; its
			// release could not see this entry, so it goes now.
			renamed = append(renamed, deletion{parent: parentOf(back[i]), id: r.Entry.GetId()})
		case (r.Code == codes.OK || r.Code == codes.AlreadyExists) && r.Entry != nil:
			v.put(s.opts.IDs, r.Entry)
			if r.Code == codes.OK {
				if from[i].withdrawn != nil {
					s.withdrawn[from[i].id] = from[i].withdrawn
				}
				if from[i].retained != nil {
					s.retained[from[i].id] = *from[i].retained
				}
				// The entry is as the plan found it: its holder passes
				// again, so that a grant it withdrew since goes.
				if o, known, _ := s.claims.known(from[i].holder, from[i].by.Key()); known {
					notify = append(notify, o)
				}
			}
		default:
			v.invalidate()
			failed = append(failed, fmt.Sprintf("%s: %s %s", back[i].Id, r.Code, r.Message))
		}
	}
	s.mu.Unlock()
	for _, o := range notify {
		s.opts.Notify(o)
	}
	// Delete what SPIRE renamed even when the call failed in part.
	renameErr := s.deleteRenamed(ctx, p.tag, renamed, false)
	if err != nil {
		return fmt.Errorf("put back %d entries taken over: %w", len(back), err)
	}
	if renameErr != nil {
		return renameErr
	}
	if len(failed) > 0 {
		return fmt.Errorf("put back entries taken over: %v: %w", failed, ErrTransient)
	}
	return nil
}

// stillClaimed reports whether the holder of t is still a known owner,
// not being released; s.mu is held.
func (s *Syncer) stillClaimed(t takeover) bool {
	if s.releasing[t.holder] > 0 {
		return false
	}
	_, known, _ := s.claims.known(t.holder, t.by.Key())
	return known
}

// claimedBy reports whether the owner tagged tag, not being released,
// still claims k; s.mu is held.
func (s *Syncer) claimedBy(tag string, k entries.Key) bool {
	if s.releasing[tag] > 0 {
		return false
	}
	_, _, claimsK := s.claims.known(tag, k)
	return claimsK
}

// withoutReplaced leaves out of stale the entries that entries SPIRE just
// refused to create may have been meant to replace, while a pod still
// needs them. A stale entry that retention judges by pods (see
// retainer.keep) stays when SPIRE refused an entry of the same namespace
// and service account, and a pod recorded when the entry was first found
// no longer wanted (one no existing entry under its parent served) still
// runs, still matches it, and is served by no entry owner wants that SPIRE
// holds under the entry's parent (an agent serves only its own entries).
// The refused entry may be under another parent (a node re-created with a
// new UID, or a changed parent) or select the pods by other selectors (a
// changed template). A stale entry whose selectors the pod cache cannot
// judge stays when a refused entry has its selectors or its SPIFFE ID (a
// change of the other). A pod started or relabelled later, an entry no pod
// needs, or a refusal in another account keeps nothing: a refusal someone
// provokes must not keep an identity withdrawn from others. The price is
// that, while SPIRE refuses, an entry may stay under a node its pods have
// left. The refusal is reported, and the caller's next pass is a full one
// (see Outcome.HeldBack).
func (s *Syncer) withoutReplaced(ctx context.Context, owner Owner, stale []deletion, refused []Failed) []deletion {
	accounts := map[string]bool{}
	for i := range refused {
		if sh, ok := entries.ShapeOf(&refused[i].Entry); ok {
			accounts[sh.Namespace+"/"+sh.ServiceAccount] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// What owner wants and SPIRE now holds, without the refused creates.
	r := retainer{s: s, ctx: ctx, owner: owner, p: &plan{}}
	var remaining []deletion
	for _, d := range stale {
		v := s.views[d.parent]
		if v == nil || v.ours[d.id] == nil {
			remaining = append(remaining, d)
			continue
		}
		if !s.stillNeeded(&r, d, &v.ours[d.id].entry, refused, accounts) {
			remaining = append(remaining, d)
		}
	}
	return remaining
}

// stillNeeded reports whether the stale entry e (d) must stay because an
// entry refused in its account may have been meant to serve a running pod
// in its place (see withoutReplaced). s.mu is held.
func (s *Syncer) stillNeeded(r *retainer, d deletion, e *entries.Entry, refused []Failed, accounts map[string]bool) bool {
	sh, ok := entries.ShapeOf(e)
	if !ok || s.opts.Pods == nil {
		return slices.ContainsFunc(refused, func(f Failed) bool {
			return f.Entry.SpiffeID == e.SpiffeID || slices.Equal(f.Entry.Selectors, e.Selectors)
		})
	}
	needs, recorded := s.withdrawn[d.id]
	if !recorded || !accounts[sh.Namespace+"/"+sh.ServiceAccount] {
		return false
	}
	pods, err := s.opts.Pods(r.ctx, sh.Namespace, sh.ServiceAccount)
	if err != nil {
		logf.FromContext(r.ctx).Error(err, "reading pods; keeping an entry whose replacement SPIRE refused", "entryID", d.id)
		return true
	}
	for _, pod := range pods {
		if !needs[pod.UID] || !sh.MatchesPod(pod.UID, pod.Labels) || !r.servedUnder(pod, d.parent) {
			continue
		}
		if _, here, _ := r.covers(sh, pod, d.parent, spiffeid.ID{}); !here {
			return true
		}
	}
	return false
}

// deleteStale deletes entries owner no longer wants and hands each whose
// key another owner claims to that owner in the same call (see handOver).
func (s *Syncer) deleteStale(ctx context.Context, stale []deletion) error {
	if len(stale) == 0 {
		return nil
	}
	s.mu.Lock()
	held := make([]entries.Entry, 0, len(stale))
	for _, d := range stale {
		if v := s.views[d.parent]; v != nil && v.ours[d.id] != nil {
			held = append(held, v.ours[d.id].entry)
		}
	}
	s.mu.Unlock()
	if err := s.deleteAll(ctx, stale); err != nil {
		return err
	}
	s.mu.Lock()
	next := s.handOver(held)
	s.mu.Unlock()
	s.createFor(ctx, next)
	return nil
}

// isTransient reports whether a per-entry or call failure may pass on its
// own (SPIRE answers Internal for datastore errors); the pass is retried
// with backoff rather than reported as refused.
func isTransient(c codes.Code) bool {
	switch c {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.ResourceExhausted, codes.Aborted,
		codes.Internal:
		return true
	}
	return false
}

// trimsOfHeldBack returns the updates that withdraw every grant beyond
// owner's from the entries of stale that the pass holds back (those not in
// deleting): what replaces them failed, so they stay, but only as the
// identity they stand for.
func (s *Syncer) trimsOfHeldBack(owner Owner, stale, deleting []deletion) []update {
	going := make(map[string]bool, len(deleting))
	for _, d := range deleting {
		going[d.id] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var trims []update
	for _, d := range stale {
		if going[d.id] {
			continue
		}
		if o := s.views[d.parent].ours[d.id]; o != nil {
			if u, ok := trimmed(&o.entry, d.id, owner.Grants); ok {
				trims = append(trims, u)
			}
		}
	}
	return trims
}

// updateAll sends updates grouped by mask, since BatchUpdateEntry takes one
// mask per call. A refused update leaves its entry as it was; it is then
// trimmed of the grants the refused one withdrew.
func (s *Syncer) updateAll(ctx context.Context, ups []update, out *Outcome) error {
	groups := map[string][]update{}
	var order []string
	for _, u := range ups {
		m := entries.MaskString(u.mask)
		if _, ok := groups[m]; !ok {
			order = append(order, m)
		}
		groups[m] = append(groups[m], u)
	}
	var (
		stale     bool
		transient int
		trims     []update
		callErrs  []error // calls that failed as a whole
	)
	for _, m := range order {
		g := groups[m]
		in := make([]*types.Entry, len(g))
		for i, u := range g {
			in[i] = u.entry.Proto(u.id)
		}
		res, err := s.api.Update(ctx, in, g[0].mask)
		s.mu.Lock()
		for i, r := range res {
			u := g[i]
			v := s.views[u.entry.ParentID.String()]
			switch {
			case r.Code == codes.OK:
				// The response only carries the masked fields; record what we sent.
				v.put(s.opts.IDs, in[i])
				if !u.trim {
					out.Registered[u.entry.Key()] = u.id
				}
			case r.Code == codes.NotFound:
				v.remove(u.id)
				v.invalidate()
				stale = true
			default:
				if isTransient(r.Code) && !isRefusal(u.entry, r, nil) {
					v.invalidate()
					transient++
				} else if !isRefusal(u.entry, r, out) {
					out.Failed = append(out.Failed, Failed{Entry: *u.entry, Reason: r.Code.String(), Message: r.Message})
				}
				// Refused, or failed for a cause that may pass (or may not:
				// what a tenant renders can fail SPIRE's datastore every
				// time): the entry stays as it was, but not with a grant
				// the update withdrew. The trim asks for nothing else. A
				// probe withdrew nothing: the grants are its holder's.
				if have := v.ours[u.id]; have != nil && !u.trim && !u.probe {
					if t, ok := trimmed(&have.entry, u.id, u.entry.Grants()); ok {
						trims = append(trims, t)
					}
				}
			}
		}
		s.mu.Unlock()
		if err != nil {
			// Its entries got the call's code above (and their trims);
			// the calls of the other masks go on.
			callErrs = append(callErrs, fmt.Errorf("update %d entries (%s): %w: %w", len(in), m, errWholeCall, err))
		}
	}
	if len(trims) > 0 {
		if err := s.updateAll(ctx, trims, out); err != nil {
			if len(callErrs) > 0 {
				// The failed call decides how the pass is reported.
				return fmt.Errorf("%w (and the grant trims: %v)", errors.Join(callErrs...), err)
			}
			return err
		}
	}
	if len(callErrs) > 0 {
		return errors.Join(callErrs...)
	}
	if stale {
		return fmt.Errorf("update entries: %w", ErrStale)
	}
	if transient > 0 {
		return fmt.Errorf("update %d entries: %w", transient, ErrTransient)
	}
	return nil
}

// deleteAll deletes entries by ID; NotFound counts as deleted.
func (s *Syncer) deleteAll(ctx context.Context, del []deletion) error {
	_, err := s.deleteEach(ctx, del)
	return err
}

// deleteEach is deleteAll that also says which of del are gone (deleted,
// or not found), whether or not the call failed in part.
func (s *Syncer) deleteEach(ctx context.Context, del []deletion) ([]bool, error) {
	gone := make([]bool, len(del))
	if len(del) == 0 {
		return gone, nil
	}
	ids := make([]string, len(del))
	for i, d := range del {
		ids[i] = d.id
	}
	res, err := s.api.Delete(ctx, ids)
	var (
		failed    []string
		transient int
	)
	s.mu.Lock()
	for i, r := range res {
		v := s.views[del[i].parent]
		switch {
		case r.Code == codes.OK || r.Code == codes.NotFound:
			gone[i] = true
			if v != nil {
				v.remove(del[i].id)
			}
			delete(s.retained, del[i].id)
			delete(s.withdrawn, del[i].id)
		case isTransient(r.Code):
			if v != nil {
				v.invalidate()
			}
			transient++
		default:
			failed = append(failed, fmt.Sprintf("%s: %s %s", del[i].id, r.Code, r.Message))
		}
	}
	s.mu.Unlock()
	if err != nil {
		return gone, fmt.Errorf("delete %d entries: %w", len(ids), err)
	}
	if len(failed) > 0 {
		return gone, fmt.Errorf("%w: %d of them: %v", ErrDeleteRefused, len(failed), failed)
	}
	if transient > 0 {
		return gone, fmt.Errorf("delete %d entries: %w", transient, ErrTransient)
	}
	return gone, nil
}

// ViewsDue reports whether the view of a parent under which owner holds
// entries is invalid or older than the resync interval: a full Sync of
// owner would then read SPIRE again under it (and repair what was changed
// there by hand), which SyncDelta never does. Its cost grows with the
// number of parents read.
func (s *Syncer) ViewsDue(owner Owner) bool {
	tag := owner.Tag()
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.views {
		if v.held[tag] > 0 && !v.fresh(now, s.opts.ResyncInterval) {
			return true
		}
	}
	return false
}

// Registered reports whether SPIRE holds e under the ID owner registers it
// with: an entry only the operator can have written, since the operator's
// service account token reaches the API server, not SPIRE. It witnesses
// that a record of e kept elsewhere (a status) is the operator's own.
func (s *Syncer) Registered(ctx context.Context, owner Owner, e *entries.Entry) (bool, error) {
	ok, err := s.api.Exists(ctx, s.opts.IDs.EntryIDFor(owner.Tag(), e))
	if err != nil {
		return false, fmt.Errorf("look up entry %s: %w", e.SpiffeID, err)
	}
	return ok, nil
}

// Stats counts the view, for tests and benchmarks.
func (s *Syncer) Stats() (parents, ours int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.views {
		ours += len(v.ours)
	}
	return len(s.views), ours
}
