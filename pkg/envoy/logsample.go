package envoy

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// LogSampleInterval is the least time between two lines of one SampledLog:
// request-shaped anomalies come from clients, and a client must not be able
// to flood the log.
const LogSampleInterval = 10 * time.Second

// SampledLog prints at most one line per LogSampleInterval and reports how
// many it suppressed since the last one. The zero value (nil Log) is silent.
type SampledLog struct {
	Log        *slog.Logger // where lines go; nil: nowhere
	next       atomic.Int64 // unix nanoseconds before which lines are dropped
	suppressed atomic.Int64
}

// Print logs msg and args at Warn, unless a line went out less than
// LogSampleInterval ago: then it only counts the line as suppressed.
func (l *SampledLog) Print(msg string, args ...any) {
	if l.Log == nil {
		return
	}
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(LogSampleInterval)) {
		l.suppressed.Add(1)
		return
	}
	args = append(args, "suppressed", l.suppressed.Swap(0))
	l.Log.Warn(msg, args...)
}
