package manager

import (
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// lazyFields is a zapcore.Core whose With encodes the fields it is given
// only once a line is written through the Core it returns (or one derived
// from it), with zapcore.NewLazyWith. controller-runtime gives every pass
// a logger with the controller, the object and a reconcile ID; at the
// default level a successful pass writes no line, and the JSON encoder
// encoding those fields at once was a tenth of what a pass allocated.
// Fields hold their values as With received them; a pointer's target is
// read when the line is written.
type lazyFields struct {
	zapcore.Core
}

// With returns a Core that adds fields to every line, encoding them when
// the first line is written.
func (c lazyFields) With(fields []zapcore.Field) zapcore.Core {
	return lazyFields{Core: zapcore.NewLazyWith(c.Core, fields)}
}

// withLazyFields is the zap option that makes a logger's With lazy.
func withLazyFields() zap.Option {
	return zap.WrapCore(func(core zapcore.Core) zapcore.Core { return lazyFields{Core: core} })
}
