package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// postgresSettings are the settings of BenchmarkPostgres, from the
// environment: BENCH_PG_WORKLOADS (default 10000), BENCH_PG_CONCURRENCY
// (comma-separated --spire-write-concurrency values, default 1,2,4,8) and
// BENCH_ROUNDS (default 1).
type postgresSettings struct {
	workloads, rounds int
	concurrency       []int
}

func loadPostgresSettings() (postgresSettings, error) {
	s := postgresSettings{workloads: 10000, rounds: 1, concurrency: []int{1, 2, 4, 8}}
	for env, v := range map[string]*int{"BENCH_PG_WORKLOADS": &s.workloads, "BENCH_ROUNDS": &s.rounds} {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*v = n
		}
	}
	if list, err := positiveInts("BENCH_PG_CONCURRENCY"); err != nil || list != nil {
		s.concurrency = list
		return s, err
	}
	return s, nil
}

// positiveInts parses the comma-separated positive numbers of environment
// variable env; nil when it is unset.
func positiveInts(env string) ([]int, error) {
	list := os.Getenv(env)
	if list == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s %q: %q is not a positive number", env, list, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// freshDatabases returns a function giving the options of a spire-server
// (the benchmark's trust domain, at INFO) on a new database of pg at each
// call, named prefix1, prefix2, ...
func freshDatabases(ctx context.Context, pg *testenv.Postgres, prefix string) func() (testenv.SpireOptions, error) {
	databases := 0
	return func() (testenv.SpireOptions, error) {
		databases++
		conn, err := pg.CreateDatabase(ctx, fmt.Sprintf("%s%d", prefix, databases))
		if err != nil {
			return testenv.SpireOptions{}, err
		}
		o := sqliteSpire()
		o.PostgresConnection = conn
		return o, nil
	}
}

// runEach loads a benchmark's settings and runs it b.N times.
func runEach[S any](b *testing.B, load func() (S, error), run func(*testing.B, S) error) {
	s, err := load()
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		if err := run(b, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPostgres converges the same workloads (one Deployment and
// service account each, one fixed parent) against a spire-server whose
// datastore is PostgreSQL, once per --spire-write-concurrency, and prints
// each converge time beside raw floors on the same PostgreSQL server: the
// same entries written straight to SPIRE in batches of 50, one call at a
// time and as many calls at a time as the operator's setting. Every
// measure starts on a fresh database and a fresh spire-server, at INFO.
// Use -benchtime 1x.
func BenchmarkPostgres(b *testing.B) { runEach(b, loadPostgresSettings, runPostgres) }

func runPostgres(b *testing.B, s postgresSettings) error {
	ctx := context.Background()
	rep := &report{}
	rep.add("# spiffe-operator on PostgreSQL, %s: %d workloads, one fixed parent, SPIRE at INFO with the sql datastore on PostgreSQL; load average %s",
		time.Now().UTC().Format(time.RFC3339), s.workloads, loadAverage())

	env, err := startPostgresBench(b)
	if err != nil {
		return err
	}
	defer env.stop()
	pg, cp, k8s, bin := env.pg, env.cp, env.k8s, env.bin

	ns := fmt.Sprintf("pg-%d", s.workloads)
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		return err
	}
	t0 := time.Now()
	if err := createDeployments(ctx, k8s, ns, "w", s.workloads); err != nil {
		return err
	}
	b.Logf("created %d Deployments in %s", s.workloads, time.Since(t0).Round(time.Millisecond))

	// Each measure gets a database of its own on the one PostgreSQL server.
	fresh := freshDatabases(ctx, pg, "spire")
	entry := func(i int) *types.Entry { return floorEntry(ns, i, "/spire/agent/k8s_psat/bench", true) }
	fixedParent := func(sp *v1alpha1.SpiffeRegistrationSpec) { sp.ParentID = parentID }
	for r := range s.rounds {
		for _, c := range s.concurrency {
			opts, err := fresh()
			if err != nil {
				return err
			}
			floor1, err := floorOf(ctx, opts, 1, s.workloads, entry)
			if err != nil {
				return fmt.Errorf("floor at 1 call: %w", err)
			}
			floorC := floor1
			if c > 1 {
				if opts, err = fresh(); err != nil {
					return err
				}
				if floorC, err = floorOf(ctx, opts, c, s.workloads, entry); err != nil {
					return fmt.Errorf("floor at %d calls: %w", c, err)
				}
			}
			if opts, err = fresh(); err != nil {
				return err
			}
			name := fmt.Sprintf("%s-c%d-r%d", ns, c, r)
			d, count, rss, err := convergeMode(ctx, k8s, cp.KubeconfigPath, bin, ns, name, s.workloads, fixedParent, opts,
				"--spire-write-concurrency", strconv.Itoa(c))
			if err != nil {
				return fmt.Errorf("write concurrency %d: %w", c, err)
			}
			floors := fmt.Sprintf("%.2fx the raw floor at 1 call at a time (%s)", d.Seconds()/floor1.Seconds(), floor1.Round(time.Millisecond))
			if c > 1 {
				floors = fmt.Sprintf("%.2fx the raw floor at %d calls at a time (%s), ", d.Seconds()/floorC.Seconds(), c, floorC.Round(time.Millisecond)) + floors
			}
			rep.add("round %d, --spire-write-concurrency %d: %d entries in SPIRE; converge %s = %s; operator RSS %.1f MiB; load average %s",
				r+1, c, count, d.Round(time.Millisecond), floors, rss, loadAverage())
		}
	}
	return rep.write(os.Getenv("BENCH_PG_OUT"))
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, as
// /proc/loadavg gives them ("unknown" where there is none).
func loadAverage() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
