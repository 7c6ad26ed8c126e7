package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// Options configure Run.
type Options struct {
	// Duration is how long churn and faults run; quiescence follows.
	Duration time.Duration
	// Seed seeds the churn generator and the fault schedule.
	Seed int64
	// Progress receives one line per step and fault; nil discards.
	Progress io.Writer
	// QuiescenceTimeout bounds the wait for quiescence; 0 means 5 minutes.
	QuiescenceTimeout time.Duration
	// SpireHA runs two spire-servers on one PostgreSQL database, the
	// operators fail over between them, and the spire-server fault kills
	// and restarts one server at a time while the other serves.
	SpireHA bool
}

// spireServers is the number of spire-servers of a run.
func (o Options) spireServers() int {
	if o.SpireHA {
		return 2
	}
	return 1
}

// throttledQPS is the Kubernetes client rate of every operator's second
// replica: whenever it leads, the operator works throttled.
const throttledQPS = "5"

func codeOf(err error) codes.Code { return status.Code(err) }

// Run starts the local cluster with two replicas of each operator, seeds
// foreign state, runs churn and faults for opts.Duration while checking
// the invariants, waits for quiescence, checks again and returns the
// report. An error means the run itself failed, not an invariant.
func Run(ctx context.Context, opts Options) (_ *Report, err error) {
	if opts.QuiescenceTimeout == 0 {
		opts.QuiescenceTimeout = 5 * time.Minute
	}
	out := opts.Progress
	if out == nil {
		out = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(out, "[chaos] "+format+"\n", args...) }
	rep := newReport(opts.Seed, opts.Duration)
	cl, err := framework.StartLocal(ctx, framework.LocalOptions{
		Progress: out, Replicas: 2, AuditLog: true, SpireServers: opts.spireServers(),
		ExtraArgs: func(op string, replica int) []string {
			var args []string
			if op == "bundle-operator" {
				args = append(args, "--source-namespaces="+framework.Namespace)
			}
			if replica == 1 {
				args = append(args, "--kube-api-qps="+throttledQPS, "--kube-api-burst="+throttledQPS)
			}
			return args
		},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, cl.Diagnostics())
		}
		if err != nil || len(rep.Violations()) > 0 {
			if dir, kerr := keepEvidence(cl, opts.Seed); kerr == nil {
				rep.note("logs and audit logs kept in %s", dir)
				say("logs and audit logs kept in %s", dir)
			}
		}
		err = errors.Join(err, cl.Stop())
	}()
	rep.note("each operator's replica 1 runs with --kube-api-qps=%s --kube-api-burst=%s (API client throttling whenever it leads)", throttledQPS, throttledQPS)
	if opts.SpireHA {
		rep.note("SPIRE in HA: %d spire-servers on one PostgreSQL database; the operators get every server's socket", opts.spireServers())
	}
	rep.note("leader check: lease %s, margin %s (kube-apiserver and spire-server stamp from one host clock)", leaseDuration, clockMargin)

	c := cl.Client()
	ks := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: "kube-system"}, ks); err != nil {
		return nil, err
	}
	o := &oracle{c: c, cl: cl, td: cl.TrustDomain(), parent: cl.AgentParentID(),
		prefix: "trustplane." + strings.ReplaceAll(string(ks.UID), "-", "")[:8] + "."}

	users, leases, binaries := map[string]string{}, map[string]string{}, map[string]string{}
	var replicas []string
	for _, op := range framework.Operators {
		leases[op+".trustplane.dev"] = op
		for _, r := range cl.Replicas(op) {
			users[cl.ReplicaUser(r)] = r
			binaries[cl.ReplicaBinary(r)] = r
			replicas = append(replicas, r)
		}
	}
	opOf := func(r string) string { return r[:strings.LastIndex(r, "-")] }
	audit := newAuditLog(cl.AuditLogPath(), users, leases)

	src, err := newSourceCAs()
	if err != nil {
		return nil, err
	}
	gaps := newGapTracker()
	w := newWorld(c, rand.New(rand.NewPCG(uint64(opts.Seed), 1)), rep, o.td, o.parent, gaps, src)
	w.say = say
	say("seeding foreign state and the run's objects")
	if err := w.setup(ctx); err != nil {
		return nil, err
	}
	fs, err := seedForeign(ctx, cl, o)
	if err != nil {
		return nil, err
	}
	say("waiting for a leader of each operator")
	if err := waitLeaders(ctx, audit); err != nil {
		return nil, err
	}

	sup := newSupervisor(cl, rep)
	spireDown := &sync.RWMutex{}
	ch := &checker{o: o, rep: rep, fs: fs, gaps: gaps, src: src, cl: cl, spireDown: spireDown, audit: audit, spireEver: map[string]bool{}}
	bg, stopBg := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	goLoop := func(f func(context.Context)) {
		bgWG.Add(1)
		go func() { defer bgWG.Done(); f(bg) }()
	}
	goLoop(func(ctx context.Context) { sup.run(ctx, replicas) })
	goLoop(func(ctx context.Context) { every(ctx, 2*time.Second, ch.foreign) })
	goLoop(func(ctx context.Context) { every(ctx, 500*time.Millisecond, ch.entries) })
	goLoop(func(ctx context.Context) { every(ctx, time.Second, ch.bundles) })
	goLoop(func(ctx context.Context) { every(ctx, 2*time.Second, ch.bindings) })
	goLoop(func(ctx context.Context) {
		every(ctx, 2*time.Second, func(context.Context) {
			if err := audit.refresh(); err != nil {
				rep.note("audit log: %v", err)
			}
		})
	})
	defer func() {
		stopBg()
		bgWG.Wait()
	}()

	say("churn and faults for %s (seed %d)", opts.Duration, opts.Seed)
	rep.begin()
	churnCtx, stopChurn := context.WithTimeout(ctx, opts.Duration)
	defer stopChurn()
	f := &faulter{cl: cl, rep: rep, rnd: rand.New(rand.NewPCG(uint64(opts.Seed), 2)), audit: audit, sup: sup,
		out: say, spireDown: spireDown, lastEnd: time.Now()}
	var loops sync.WaitGroup
	loops.Add(2)
	go func() {
		defer loops.Done()
		f.run(ctx, churnCtx, 6*time.Second)
	}()
	var churnErr error
	go func() {
		defer loops.Done()
		for churnCtx.Err() == nil {
			if err := w.step(churnCtx); err != nil && churnCtx.Err() == nil {
				rep.churned("(step refused: API server or SPIRE restarting)")
				say("+%s churn step failed: %v", rep.since(), err)
			}
			sleepRandom(churnCtx, w.rnd, 150*time.Millisecond)
		}
	}()
	loops.Wait()
	if churnErr != nil {
		return nil, churnErr
	}
	lastFault := f.lastEnd

	say("quiescence: source restored, finished rollouts, every replica running")
	if err := retry(ctx, time.Minute, w.restoreSource); err != nil {
		return nil, err
	}
	if err := ch.quiesce(ctx, w, sup, replicas, lastFault, opts.QuiescenceTimeout); err != nil {
		return nil, err
	}
	stopBg()
	bgWG.Wait()

	// Final checks: foreign state, and every write against the lease timeline.
	ch.foreign(ctx)
	if err := audit.refresh(); err != nil {
		return nil, err
	}
	var spireW []write
	for i, s := range cl.SpireServers() {
		w := spireWrites(s.Logs(), binaries)
		if opts.SpireHA {
			rep.note("spire-server %d: %d SPIRE entry writes by replicas in its audit log", i, len(w))
		}
		spireW = append(spireW, w...)
	}
	n, bad := audit.nonLeaderWrites(opOf, spireW)
	rep.checked(InvLeaderWrites, n)
	for _, b := range bad {
		rep.violate(InvLeaderWrites, "%s", b)
	}
	changes := audit.leaderChanges()
	ops := make([]string, 0, len(changes))
	for op := range changes {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		rep.note("%s: %d leader changes", op, changes[op])
	}
	rep.note("%d SPIRE entry writes attributed to replicas by spire-server's audit log", len(spireW))
	rep.note("supervisor restarted exited replicas %d times", sup.restarts)
	rep.note("identity gap readings: %d required entries found present", ch.presentSeen)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.Load = strings.Join(strings.Fields(string(load))[:3], " ")
	}
	return rep, nil
}

// waitLeaders waits until the audit log shows a lease holder of every operator.
func waitLeaders(ctx context.Context, audit *auditLog) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if err := audit.refresh(); err != nil {
			return err
		}
		all := true
		for _, op := range framework.Operators {
			if _, ok := audit.leader(op); !ok {
				all = false
			}
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return errors.New("no leader of every operator after 90s")
}

// keepEvidence copies the operators', spire-server's and kube-apiserver's
// logs and the audit log to a new directory that outlives the run.
func keepEvidence(cl *framework.Local, seed int64) (string, error) {
	dir, err := os.MkdirTemp("", fmt.Sprintf("chaos-evidence-%d-", seed))
	if err != nil {
		return "", err
	}
	files, _ := filepath.Glob(filepath.Join(cl.Dir(), "*.log"))
	files = append(files, filepath.Join(cl.ControlPlane().LogDir, "kube-apiserver.log"))
	names := map[string]string{}
	for i, s := range cl.SpireServers() {
		f := filepath.Join(s.Dir, "server.log")
		files = append(files, f)
		names[f] = fmt.Sprintf("spire-server-%d.log", i)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name := names[f]
		if name == "" {
			name = filepath.Base(f)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// retry calls f until it succeeds or timeout passes.
func retry(ctx context.Context, timeout time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f(ctx)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// every runs f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func(context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
