package spire_test

import (
	"context"
	"errors"
	"testing"
	"time"

	entryv1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/entry/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc"

	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// deadlineConn records the deadline of each unary call and answers a
// BatchDeleteEntry with one OK result per ID (any other call fails once
// its deadline is recorded).
type deadlineConn struct {
	left time.Duration
	set  bool
}

func (c *deadlineConn) Invoke(ctx context.Context, _ string, args, reply any, _ ...grpc.CallOption) error {
	if d, ok := ctx.Deadline(); ok {
		c.left, c.set = time.Until(d), true
	}
	req, ok1 := args.(*entryv1.BatchDeleteEntryRequest)
	resp, ok2 := reply.(*entryv1.BatchDeleteEntryResponse)
	if !ok1 || !ok2 {
		return errors.New("unexpected call")
	}
	for _, id := range req.GetIds() {
		resp.Results = append(resp.Results, &entryv1.BatchDeleteEntryResponse_Result{Id: id, Status: &types.Status{}})
	}
	return nil
}

func (c *deadlineConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

// TestWriteGuardBoundsTheWritesItAllows: the guard was asked once, before
// the RPC, which then ran under the client's own timeout (30s by default,
// twice the 15s lease): a write allowed just before the renew deadline
// could reach spire-server after another replica took the lease (SPIRE has
// no fencing token to refuse it), when the process paused between the guard
// and the send or the server was slow. Each write, of entries and of
// federation relationships, is now cut off when the time the guard leaves
// runs out.
func TestWriteGuardBoundsTheWritesItAllows(t *testing.T) {
	const left = 2 * time.Second
	guard := func() (time.Time, error) { return time.Now().Add(left), nil }
	conn := &deadlineConn{}
	c := spire.NewClient(conn, spire.Options{WriteGuard: guard})
	if _, err := c.Delete(context.Background(), []string{"trustplane.0123456789ab.0123456789abcdef0123"}); err != nil {
		t.Fatal(err)
	}
	if !conn.set || conn.left > left {
		t.Errorf("an entry delete allowed with %s left may run for %s (deadline set: %v)", left, conn.left.Round(time.Millisecond), conn.set)
	}
	fed := &deadlineConn{}
	fc := spire.NewFederationClient(fed, spire.Options{WriteGuard: guard})
	_ = fc.Delete(context.Background(), "federated.example")
	if !fed.set || fed.left > left {
		t.Errorf("a federation delete allowed with %s left may run for %s (deadline set: %v)", left, fed.left.Round(time.Millisecond), fed.set)
	}
	// A read is not a write: it keeps the client's timeout.
	read := &deadlineConn{}
	rc := spire.NewClient(read, spire.Options{WriteGuard: guard, Timeout: time.Minute})
	_, _ = rc.ListAll(context.Background())
	if !read.set || read.left <= left {
		t.Errorf("a read was cut to the guard's time: %s left", read.left.Round(time.Millisecond))
	}
}

// TestAPauseAfterTheWriteGuardDoesNotExtendTheWrite: the guard gives an
// instant, not a length of time, so a pause of the process after it
// answered (what the guard exists for) does not push the write's end past
// the renew deadline. With a length of time, the RPC went out after the
// renew deadline with the whole length still to run.
func TestAPauseAfterTheWriteGuardDoesNotExtendTheWrite(t *testing.T) {
	renewDeadline := time.Now().Add(200 * time.Millisecond)
	guard := func() (time.Time, error) {
		defer time.Sleep(500 * time.Millisecond) // the process is paused after the guard answered
		return renewDeadline, nil
	}
	conn := &deadlineConn{}
	c := spire.NewClient(conn, spire.Options{WriteGuard: guard})
	_, _ = c.Delete(context.Background(), []string{"trustplane.0123456789ab.0123456789abcdef0123"})
	if !conn.set {
		t.Fatal("the RPC was not sent with a deadline")
	}
	if deadline := time.Now().Add(conn.left); deadline.Sub(renewDeadline) > 50*time.Millisecond {
		t.Errorf("a SPIRE delete allowed before a pause may run until %s past the renew deadline",
			deadline.Sub(renewDeadline).Round(time.Millisecond))
	}
}
