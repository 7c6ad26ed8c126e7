// Command chaos runs the operators, two replicas each, through churn and
// faults on a local cluster and prints the invariant table (make chaos
// DURATION=30m SEED=...). It exits 1 on any violation.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/trustplane/trustplane/e2e/chaos"
)

func main() {
	duration := flag.Duration("duration", 30*time.Minute, "how long churn and faults run")
	seed := flag.Int64("seed", time.Now().UnixNano(), "seed of the churn generator and the fault schedule")
	spireHA := flag.Bool("spire-ha", os.Getenv("CHAOS_SPIRE_HA") == "1", "run two spire-servers on one PostgreSQL database and kill one at a time while the other serves (env CHAOS_SPIRE_HA=1)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("chaos: seed %d, duration %s, SPIRE in HA %t\n", *seed, *duration, *spireHA)
	rep, err := chaos.Run(ctx, chaos.Options{Duration: *duration, Seed: *seed, Progress: os.Stdout, SpireHA: *spireHA})
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	fmt.Print(rep.Table())
	if len(rep.Violations()) > 0 {
		os.Exit(1)
	}
}
