package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// entryNotifyChannel is the PostgreSQL notification channel on which the
// trigger of entryNotifierSQL announces every entry SPIRE commits.
const entryNotifyChannel = "bench_entry_committed"

// entryNotifierSQL installs, in SPIRE's database, a trigger that announces
// the ID of every entry row SPIRE inserts, and that of every row it
// deletes after goneMark. PostgreSQL delivers a notification when the
// transaction commits, so its arrival is the moment the change became
// visible through SPIRE's API.
const entryNotifierSQL = `
CREATE OR REPLACE FUNCTION bench_entry_committed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' THEN
		PERFORM pg_notify('` + entryNotifyChannel + `', '` + goneMark + `' || OLD.entry_id);
		RETURN OLD;
	END IF;
	PERFORM pg_notify('` + entryNotifyChannel + `', NEW.entry_id);
	RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS bench_entry_committed ON registered_entries;
CREATE TRIGGER bench_entry_committed AFTER INSERT OR DELETE ON registered_entries
	FOR EACH ROW EXECUTE FUNCTION bench_entry_committed();`

// goneMark prefixes the ID of a deleted entry in a notification.
const goneMark = "gone:"

// entryNotifier times entries from SPIRE's side without asking SPIRE: it
// listens for the commit notifications of a trigger on SPIRE's entry
// table, so timing a sample adds no load to SPIRE or its database, where
// polling GetEntry every 2 ms added hundreds of calls a second to the
// very servers whose tail the samples measure.
type entryNotifier struct {
	conn   *pgx.Conn
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// waiting holds, for each entry ID expected and not yet announced,
	// the channel its announcement's arrival time is sent on.
	waiting map[string]chan time.Time
	// err is why listening ended, if it did.
	err error
}

// listenForEntries installs the trigger in the database at url (SPIRE's,
// whose schema SPIRE has created) and starts listening.
func listenForEntries(ctx context.Context, url string) (*entryNotifier, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to SPIRE's database: %w", err)
	}
	if _, err := conn.Exec(ctx, entryNotifierSQL); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("install the entry trigger: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+entryNotifyChannel); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("listen on %s: %w", entryNotifyChannel, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	n := &entryNotifier{conn: conn, cancel: cancel, done: make(chan struct{}), waiting: map[string]chan time.Time{}}
	go n.listen(lctx)
	return n, nil
}

// listen hands each announced ID's arrival time to its waiter.
func (n *entryNotifier) listen(ctx context.Context) {
	defer close(n.done)
	for {
		note, err := n.conn.WaitForNotification(ctx)
		at := time.Now()
		if err != nil {
			n.mu.Lock()
			n.err = err
			n.mu.Unlock()
			return
		}
		n.mu.Lock()
		if ch, ok := n.waiting[note.Payload]; ok {
			delete(n.waiting, note.Payload)
			ch <- at
		}
		n.mu.Unlock()
	}
}

// expect registers entry id before the action that makes it; the returned
// wait gives the moment its commit was announced.
func (n *entryNotifier) expect(id string) func(ctx context.Context, timeout time.Duration) (time.Time, error) {
	ch := make(chan time.Time, 1)
	n.mu.Lock()
	n.waiting[id] = ch
	n.mu.Unlock()
	return func(ctx context.Context, timeout time.Duration) (time.Time, error) {
		timer := time.NewTimer(timeout)
		defer timer.Stop()
		select {
		case at := <-ch:
			return at, nil
		case <-n.done:
			n.mu.Lock()
			defer n.mu.Unlock()
			return time.Time{}, fmt.Errorf("listening for entry %s ended: %w", id, n.err)
		case <-timer.C:
			n.forget(id)
			return time.Time{}, fmt.Errorf("entry %s not announced after %s", id, timeout)
		case <-ctx.Done():
			n.forget(id)
			return time.Time{}, ctx.Err()
		}
	}
}

// expectGone is expect for the deletion of entry id.
func (n *entryNotifier) expectGone(id string) func(ctx context.Context, timeout time.Duration) (time.Time, error) {
	return n.expect(goneMark + id)
}

func (n *entryNotifier) forget(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.waiting, id)
}

// close stops listening and closes the connection.
func (n *entryNotifier) close() error {
	n.cancel()
	<-n.done
	n.mu.Lock()
	listenErr := n.err
	n.mu.Unlock()
	err := n.conn.Close(context.Background())
	if listenErr != nil && !errors.Is(listenErr, context.Canceled) {
		return errors.Join(listenErr, err)
	}
	return err
}
