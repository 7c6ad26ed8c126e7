package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Leader election timing of controller-runtime's defaults, which the
// operators keep: a lease lasts 15s, a leader gives up after failing to
// renew for 10s, candidates retry every 2s.
const (
	leaseDuration = 15 * time.Second
	retryPeriod   = 2 * time.Second
	// clockMargin is the tolerance of the leader check. The kube-apiserver
	// and spire-server run on one host and stamp their logs from its
	// clock, so there is no skew between them, only the order in which
	// two requests in flight at once are stamped.
	clockMargin = time.Second
)

// write is one successful write an operator replica made, to the API
// server or to SPIRE.
type write struct {
	At       time.Time // received
	Replica  string
	Target   string // API resource or SPIRE method
	Object   string
	IsLease  bool
	LeaseFor string // operator whose lease it renews
	// Resolution is how precise At is: spire-server stamps its log to the
	// second, so its write happened in [At, At+Resolution).
	Resolution time.Duration
}

type auditEvent struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
		APIGroup    string `json:"apiGroup"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// auditLog follows the kube-apiserver's audit log and keeps the successful
// writes of the operators' replicas.
type auditLog struct {
	path     string
	replicas map[string]string // user -> replica
	leases   map[string]string // lease name -> operator

	mu     sync.Mutex
	offset int64
	writes []write
	// renewals are the successful lease writes by operator, in order.
	renewals map[string][]write
}

func newAuditLog(path string, replicas map[string]string, leases map[string]string) *auditLog {
	return &auditLog{path: path, replicas: replicas, leases: leases, renewals: map[string][]write{}}
}

// refresh reads what the log gained since the last call.
func (a *auditLog) refresh() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if err != nil {
		return fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break // a partial last line is read again next time
		}
		a.offset += int64(len(line))
		var ev auditEvent
		if json.Unmarshal(line, &ev) != nil || ev.Stage != "ResponseComplete" || ev.ObjectRef == nil {
			continue
		}
		replica, ok := a.replicas[ev.User.Username]
		if !ok || ev.ResponseStatus == nil || ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code > 299 {
			continue
		}
		ref := ev.ObjectRef
		target := ref.Resource
		if ref.Subresource != "" {
			target += "/" + ref.Subresource
		}
		w := write{At: ev.RequestReceivedTimestamp, Replica: replica, Target: ev.Verb + " " + target,
			Object: strings.TrimPrefix(ref.Namespace+"/"+ref.Name, "/")}
		if op, ok := a.leases[ref.Name]; ok && ref.Resource == "leases" {
			w.IsLease, w.LeaseFor = true, op
			// A lease write takes effect when it completes.
			w.At = ev.StageTimestamp
			a.renewals[op] = append(a.renewals[op], w)
			continue
		}
		a.writes = append(a.writes, w)
	}
	return nil
}

// leader returns the replica holding op's lease now: the writer of its
// last successful lease write, if that is younger than a lease.
func (a *auditLog) leader(op string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rs := a.renewals[op]
	if len(rs) == 0 {
		return "", false
	}
	last := rs[len(rs)-1]
	if time.Since(last.At) > leaseDuration-retryPeriod {
		return "", false
	}
	return last.Replica, true
}

// holderAt returns who held op's lease at t by the log: the writer of the
// last lease write completed by t, and when that was.
func holderAt(renewals []write, t time.Time) (write, bool) {
	i := sort.Search(len(renewals), func(i int) bool { return renewals[i].At.After(t) })
	if i == 0 {
		return write{}, false
	}
	return renewals[i-1], true
}

// leaderAt reports whether replica r held the lease at t: it made the last
// lease write before t, less than a lease (plus the margin) before t.
func leaderAt(renewals []write, r string, t time.Time) bool {
	h, ok := holderAt(renewals, t)
	return ok && h.Replica == r && t.Sub(h.At) <= leaseDuration+clockMargin
}

// nonLeaderWrites returns every write (of the API server's log and the
// given SPIRE writes) made by a replica that did not hold its operator's
// lease when the write was received: another replica had taken it, or its
// own last renewal was older than a lease. A write is cleared when its
// replica held the lease at any instant of [t-margin, t], or, for a write
// stamped to the second, of that second.
func (a *auditLog) nonLeaderWrites(opOf func(replica string) string, spire []write) (checked int, bad []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	all := append(append([]write(nil), a.writes...), spire...)
	for _, w := range all {
		checked++
		rs := a.renewals[opOf(w.Replica)]
		from, to := w.At.Add(-clockMargin), w.At
		if w.Resolution > 0 {
			to = w.At.Add(w.Resolution - time.Nanosecond)
		}
		if leaderAt(rs, w.Replica, from) || leaderAt(rs, w.Replica, to) {
			continue
		}
		// A renewal of its own inside the window clears it too.
		if h, ok := holderAt(rs, to); ok && h.Replica == w.Replica && !h.At.Before(from) {
			continue
		}
		at := w.At.Format(time.RFC3339Nano)
		h, ok := holderAt(rs, to)
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s %s %s at %s before any lease of %s", w.Replica, w.Target, w.Object, at, opOf(w.Replica)))
		case h.Replica != w.Replica:
			bad = append(bad, fmt.Sprintf("%s %s %s at %s while %s held the lease (taken at %s)", w.Replica, w.Target, w.Object,
				at, h.Replica, h.At.Format(time.RFC3339Nano)))
		default:
			bad = append(bad, fmt.Sprintf("%s %s %s at %s, %s after its last renewal (lease %s)", w.Replica, w.Target, w.Object,
				at, to.Sub(h.At).Round(time.Millisecond), leaseDuration))
		}
	}
	return checked, bad
}

// leaderChanges counts the hand-overs of each operator's lease.
func (a *auditLog) leaderChanges() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int{}
	for op, rs := range a.renewals {
		for i := 1; i < len(rs); i++ {
			if rs[i].Replica != rs[i-1].Replica {
				out[op]++
			}
		}
	}
	return out
}

// spireWrites reads the entry writes of spire-server's audit log (log
// lines with type=audit and a caller_path, the binary of a Unix-socket
// caller) and attributes them to replicas by binary.
func spireWrites(log string, binaries map[string]string) []write {
	var out []write
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "type=audit") {
			continue
		}
		f := logfmt(line)
		replica, ok := binaries[f["caller_path"]]
		if !ok || f["status"] != "success" {
			continue
		}
		method := f["method"]
		if !strings.HasPrefix(method, "Batch") && !strings.HasPrefix(method, "Create") &&
			!strings.HasPrefix(method, "Update") && !strings.HasPrefix(method, "Delete") {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f["time"])
		if err != nil {
			continue
		}
		out = append(out, write{At: t, Replica: replica, Target: "SPIRE " + method, Object: f["entry_id"] + " " + f["spiffe_id"],
			Resolution: time.Second})
	}
	return out
}

// logfmt splits a logrus text line into its key=value fields.
func logfmt(line string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(line); {
		for i < len(line) && line[i] == ' ' {
			i++
		}
		j := i
		for j < len(line) && line[j] != '=' && line[j] != ' ' {
			j++
		}
		if j >= len(line) || line[j] != '=' {
			i = j + 1
			continue
		}
		key := line[i:j]
		j++
		var val string
		if j < len(line) && line[j] == '"' {
			k := j + 1
			var b strings.Builder
			for k < len(line) && line[k] != '"' {
				if line[k] == '\\' && k+1 < len(line) {
					k++
				}
				b.WriteByte(line[k])
				k++
			}
			val, j = b.String(), k+1
		} else {
			k := j
			for k < len(line) && line[k] != ' ' {
				k++
			}
			val, j = line[j:k], k
		}
		out[key] = val
		i = j
	}
	return out
}
