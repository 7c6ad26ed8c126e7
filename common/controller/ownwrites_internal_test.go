package controller

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// clock is a settable time for ownWrites.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func writtenAt(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, ResourceVersion: rv}}
}

// A tenant's objects whose passes end without a requeue are never read
// again after the controller's last write, so no read forgets their
// records. The records must still go once aged, or the tenant doubles the
// operator's memory for every object it may create.
func TestOwnWritesForgetsWritesNoReadComesFor(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	w := newOwnWrites(c.now)
	const tenantObjects = 1000
	for i := range tenantObjects {
		w.record(types.NamespacedName{Namespace: "tenant", Name: fmt.Sprint("b", i)}, "10", writtenAt(fmt.Sprint("b", i), "11"))
	}
	if got := w.size(); got != tenantObjects {
		t.Fatalf("kept %d records right after the writes; want %d", got, tenantObjects)
	}

	c.t = c.t.Add(ownWriteMaxAge + time.Second)
	fresh := types.NamespacedName{Namespace: "other", Name: "fresh"}
	w.record(fresh, "20", writtenAt("fresh", "21"))

	if got := w.size(); got != 1 {
		t.Errorf("kept %d records after the tenant's writes aged past %s and another write came; want only the new one", got, ownWriteMaxAge)
	}
	if got := w.since(fresh, "20"); got == nil || got.GetResourceVersion() != "21" {
		t.Errorf("the write made just now is not remembered: since returned %v", got)
	}
}

// A record past its age is not used even when nothing swept it yet: the
// pass then reads the cached copy and the optimistic lock guards its
// status write, as without the record.
func TestOwnWritesIgnoresAnAgedRecord(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	w := newOwnWrites(c.now)
	key := types.NamespacedName{Namespace: "tenant", Name: "b"}
	w.record(key, "10", writtenAt("b", "11"))

	c.t = c.t.Add(ownWriteMaxAge / 2)
	if got := w.since(key, "10"); got == nil {
		t.Fatalf("a record half its age old is not used")
	}
	c.t = c.t.Add(ownWriteMaxAge)
	if got := w.since(key, "10"); got != nil {
		t.Errorf("a record older than %s is still used: since returned version %s", ownWriteMaxAge, got.GetResourceVersion())
	}
	if got := w.size(); got != 0 {
		t.Errorf("kept %d records after reading an aged one; want 0", got)
	}
}

// A record younger than the age survives a sweep made for another write.
func TestOwnWritesKeepsYoungRecordsThroughASweep(t *testing.T) {
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	w := newOwnWrites(c.now)
	c.t = c.t.Add(ownWriteMaxAge - time.Second)
	young := types.NamespacedName{Namespace: "tenant", Name: "young"}
	w.record(young, "10", writtenAt("young", "11"))
	c.t = c.t.Add(2 * time.Second) // a sweep is due; young is 2s old
	w.record(types.NamespacedName{Namespace: "tenant", Name: "other"}, "30", writtenAt("other", "31"))
	if got := w.since(young, "10"); got == nil || got.GetResourceVersion() != "11" {
		t.Errorf("a record 2s old was swept: since returned %v", got)
	}
}
