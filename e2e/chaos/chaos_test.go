package chaos_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/trustplane/trustplane/e2e/chaos"
)

// shortSeed is the fixed seed of the short run in make test.
const shortSeed = 20261130

// TestChaosShort runs about two minutes of churn and faults with a fixed
// seed (CHAOS_DURATION and CHAOS_SEED change them) and fails on any
// violation of an invariant.
func TestChaosShort(t *testing.T) {
	duration := 2 * time.Minute
	if v := os.Getenv("CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_DURATION: %v", err)
		}
		duration = d
	}
	seed := int64(shortSeed)
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		seed = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+15*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Options{Duration: duration, Seed: seed, Progress: testWriter{t}})
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	t.Log("\n" + rep.Table())
	if v := rep.Violations(); len(v) > 0 {
		t.Errorf("%d violations (seed %d)", len(v), seed)
	}
	faults := 0
	for _, n := range rep.Faults() {
		faults += n
	}
	if faults == 0 {
		t.Errorf("no fault was injected")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
