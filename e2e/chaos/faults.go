package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/framework"
)

// Fault kinds, as the report prints them.
const (
	faultKillLeader   = "SIGKILL leader of "
	faultPauseLeader  = "SIGSTOP leader beyond its lease, then SIGCONT: "
	faultKillSpire    = "SIGKILL and restart spire-server"
	faultKillSpireHA  = "SIGKILL and restart one spire-server (the other serves): "
	faultRestartAPI   = "restart kube-apiserver (etcd kept)"
	churnRotateSpire  = "SPIRE CA rotated (prepare, activate)"
	pauseBeyondLease  = leaseDuration + 5*time.Second
	supervisorBackoff = time.Second
)

// supervisor restarts replicas that exited, as a kubelet would, except
// while a fault holds them.
type supervisor struct {
	cl  *framework.Local
	rep *Report

	mu       sync.Mutex
	held     map[string]bool
	exitedAt map[string]time.Time
	restarts int
}

func newSupervisor(cl *framework.Local, rep *Report) *supervisor {
	return &supervisor{cl: cl, rep: rep, held: map[string]bool{}, exitedAt: map[string]time.Time{}}
}

func (s *supervisor) hold(r string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held[r] = on
}

// run restarts exited replicas every second until ctx ends.
func (s *supervisor) run(ctx context.Context, replicas []string) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, r := range replicas {
			s.mu.Lock()
			held := s.held[r]
			s.mu.Unlock()
			p := s.cl.Replica(r)
			if held || p == nil || !p.Exited() {
				continue
			}
			s.mu.Lock()
			if s.exitedAt[r].IsZero() {
				s.exitedAt[r] = time.Now()
			}
			wait := time.Since(s.exitedAt[r]) < supervisorBackoff
			s.mu.Unlock()
			if wait {
				continue
			}
			if err := s.cl.StartReplica(r); err != nil {
				s.rep.note("restart of %s failed: %v", r, err)
				continue
			}
			s.mu.Lock()
			delete(s.exitedAt, r)
			s.restarts++
			s.mu.Unlock()
		}
	}
}

// allRunning reports whether every replica runs.
func (s *supervisor) allRunning(replicas []string) bool {
	for _, r := range replicas {
		if p := s.cl.Replica(r); p == nil || p.Exited() {
			return false
		}
	}
	return true
}

// faulter injects the faults on a seeded schedule.
type faulter struct {
	cl    *framework.Local
	rep   *Report
	rnd   *rand.Rand
	audit *auditLog
	sup   *supervisor
	out   func(format string, args ...any)
	// spireDown is held while spire-server is being restarted.
	spireDown *sync.RWMutex

	lastEnd time.Time
}

// schedule is the order of the faults: every kind once, shuffled, again
// and again.
func (f *faulter) schedule() []func(context.Context) (string, error) {
	var kinds []func(context.Context) (string, error)
	for _, op := range framework.Operators {
		kinds = append(kinds, f.killLeader(op))
	}
	kinds = append(kinds, f.pauseLeader, f.restartAPIServer, f.rotateSpireCA)
	if servers := len(f.cl.SpireServers()); servers > 1 {
		// SPIRE in HA: each server killed once a round, never two at once.
		for i := range servers {
			kinds = append(kinds, f.killSpireServer(i))
		}
	} else {
		kinds = append(kinds, f.killSpire)
	}
	f.rnd.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	return kinds
}

// run injects faults until schedule ends, spaced by gap plus up to gap
// again. A fault started runs to its end under ctx.
func (f *faulter) run(ctx, schedule context.Context, gap time.Duration) {
	for schedule.Err() == nil {
		for _, fault := range f.schedule() {
			sleepRandom(schedule, f.rnd, gap)
			if schedule.Err() != nil {
				return
			}
			kind, err := fault(ctx)
			if err != nil {
				f.rep.note("fault %s not injected at +%s: %v", kind, f.rep.since(), err)
				continue
			}
			if kind != "" {
				f.rep.fault(kind)
				f.out("+%s fault: %s", f.rep.since(), kind)
			}
			f.lastEnd = time.Now()
		}
	}
}

func (f *faulter) leaderOf(op string) (string, error) {
	if err := f.audit.refresh(); err != nil {
		return "", err
	}
	r, ok := f.audit.leader(op)
	if !ok {
		return "", fmt.Errorf("%s has no leader now", op)
	}
	return r, nil
}

func (f *faulter) killLeader(op string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		kind := faultKillLeader + op
		r, err := f.leaderOf(op)
		if err != nil {
			return kind, err
		}
		f.out("+%s %s: %s", f.rep.since(), kind, r)
		return kind, f.cl.KillReplica(r)
	}
}

// pauseLeader stops the leader of a random operator for longer than its
// lease, then lets it run again: it must not write as leader once awake.
func (f *faulter) pauseLeader(ctx context.Context) (string, error) {
	op := framework.Operators[f.rnd.IntN(len(framework.Operators))]
	kind := faultPauseLeader + op
	r, err := f.leaderOf(op)
	if err != nil {
		return kind, err
	}
	p := f.cl.Replica(r)
	if p == nil || p.Exited() {
		return kind, fmt.Errorf("%s is not running", r)
	}
	f.out("+%s %s: %s for %s", f.rep.since(), kind, r, pauseBeyondLease)
	f.sup.hold(r, true)
	defer f.sup.hold(r, false)
	if err := syscall.Kill(-p.Pid(), syscall.SIGSTOP); err != nil {
		return kind, fmt.Errorf("SIGSTOP %s: %w", r, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(pauseBeyondLease):
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGCONT); err != nil {
		return kind, fmt.Errorf("SIGCONT %s: %w", r, err)
	}
	return kind, nil
}

// killSpireServer kills and restarts server i of SPIRE in HA; the checks
// go on through the other server meanwhile.
func (f *faulter) killSpireServer(i int) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		return fmt.Sprintf("%sserver %d", faultKillSpireHA, i), f.cl.KillAndRestartSpire(i)
	}
}

func (f *faulter) killSpire(context.Context) (string, error) {
	f.spireDown.Lock()
	defer f.spireDown.Unlock()
	return faultKillSpire, f.cl.Spire().KillAndRestart()
}

func (f *faulter) restartAPIServer(ctx context.Context) (string, error) {
	return faultRestartAPI, f.cl.ControlPlane().RestartAPIServer(ctx)
}

// rotateSpireCA prepares a new X.509 authority and activates it. It is
// churn, not a fault, but runs on the fault schedule so that it never
// overlaps a restart of the server.
func (f *faulter) rotateSpireCA(ctx context.Context) (string, error) {
	f.spireDown.RLock()
	defer f.spireDown.RUnlock()
	out, err := f.cl.SpireCLI(ctx, testenv.LocalAuthorityArgs("prepare")...)
	if err != nil {
		return churnRotateSpire, err
	}
	ids, err := testenv.ParseLocalAuthorities(out)
	if err != nil {
		return churnRotateSpire, err
	}
	if _, err := f.cl.SpireCLI(ctx, testenv.LocalAuthorityArgs("activate", "-authorityID", ids["prepared_authority"])...); err != nil {
		return churnRotateSpire, err
	}
	f.rep.churned(churnRotateSpire)
	return "", nil
}
