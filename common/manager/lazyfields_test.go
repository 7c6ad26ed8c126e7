package manager

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// countingWith counts the With calls that reach the Core it wraps.
type countingWith struct {
	zapcore.Core
	withs *atomic.Int32
}

func (c countingWith) With(fields []zapcore.Field) zapcore.Core {
	c.withs.Add(1)
	return countingWith{Core: c.Core.With(fields), withs: c.withs}
}

// TestFieldsAreEncodedOnlyForALineWritten: a pass's logger carries fields
// (controller, object, reconcile ID) through With; encoding them at once
// cost every pass, though a pass at the default level writes no line.
// Through lazyFields no With reaches the encoding Core until a line is
// written, and the line then carries every field, in order.
func TestFieldsAreEncodedOnlyForALineWritten(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	withs := &atomic.Int32{}
	core := lazyFields{Core: countingWith{Core: obs, withs: withs}}

	chained := core.With([]zapcore.Field{zap.String("controller", "c")}).With([]zapcore.Field{zap.String("name", "n")})
	if n := withs.Load(); n != 0 {
		t.Fatalf("%d With calls reached the encoding Core before any line", n)
	}
	if ce := chained.Check(zapcore.Entry{Level: zapcore.DebugLevel, Message: "quiet"}, nil); ce != nil {
		t.Fatal("a line below the level was checked in")
	}
	if n := withs.Load(); n != 0 {
		t.Fatalf("a line below the level encoded the fields (%d With calls)", n)
	}

	ce := chained.Check(zapcore.Entry{Level: zapcore.InfoLevel, Message: "written"}, nil)
	if ce == nil {
		t.Fatal("an Info line was not checked in")
	}
	ce.Write(zap.Int("extra", 1))
	if n := withs.Load(); n != 2 {
		t.Errorf("%d With calls reached the encoding Core once a line was written, want 2", n)
	}
	entries := logs.All()
	if len(entries) != 1 {
		t.Fatalf("%d lines written, want 1", len(entries))
	}
	var keys []string
	for _, f := range entries[0].Context {
		keys = append(keys, f.Key)
	}
	if got := strings.Join(keys, ","); got != "controller,name,extra" {
		t.Errorf("the line carries fields %s, want controller,name,extra", got)
	}
}

// TestTheOperatorsLoggerCarriesLazyFieldsIntoItsLines: the logger Run sets
// up (controller-runtime's, with lazyFields) writes every value given with
// WithValues, and a WithValues no line follows allocates less than
// without lazyFields.
func TestTheOperatorsLoggerCarriesLazyFieldsIntoItsLines(t *testing.T) {
	var out bytes.Buffer
	log := crzap.New(crzap.WriteTo(&out), crzap.RawZapOpts(withLazyFields()))
	log.WithValues("controller", "spiffe", "reconcileID", "r1").WithValues("object", "p").Info("pass")
	var line map[string]any
	if err := json.Unmarshal(out.Bytes(), &line); err != nil {
		t.Fatalf("line %q: %v", out.String(), err)
	}
	for k, v := range map[string]string{"controller": "spiffe", "reconcileID": "r1", "object": "p", "msg": "pass"} {
		if line[k] != v {
			t.Errorf("%s = %v, want %q in %s", k, line[k], v, out.String())
		}
	}

	eager := crzap.New(crzap.WriteTo(&out))
	lazy := crzap.New(crzap.WriteTo(&out), crzap.RawZapOpts(withLazyFields()))
	bytesPerWith := func(l logr.Logger) int64 {
		return testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = l.WithValues("controller", "spiffe", "namespace", "", "name", "p", "reconcileID", "r1")
			}
		}).AllocedBytesPerOp()
	}
	if e, l := bytesPerWith(eager), bytesPerWith(lazy); l >= e {
		t.Errorf("a WithValues with no line allocates %d bytes with lazyFields, %d without", l, e)
	} else {
		t.Logf("a WithValues with no line allocates %d bytes with lazyFields, %d without", l, e)
	}
}
