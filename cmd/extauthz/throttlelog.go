package main

import (
	"log/slog"
	"sync"
	"time"
)

// logEvery is how often one kind of backend error (Redis, object storage)
// is logged again while it keeps happening (with the count since the last
// line).
const logEvery = time.Minute

// throttledLog tells the operator about backend trouble without flooding
// the log: the first error of each kind at WARN, then at most one line per
// kind per logEvery while it lasts, saying how many were not logged since.
type throttledLog struct {
	out *slog.Logger
	now func() time.Time

	kindsMu sync.Mutex
	kinds   map[string]*errorKind
}

type errorKind struct {
	logged     time.Time
	suppressed int
}

func newThrottledLog(log *slog.Logger) *throttledLog {
	return &throttledLog{out: log, now: time.Now, kinds: map[string]*errorKind{}}
}

// warn logs msg with args at WARN, unless an error of the same kind was
// logged less than logEvery ago; then it only counts it.
func (l *throttledLog) warn(kind, msg string, args ...any) {
	l.kindsMu.Lock()
	k, seen := l.kinds[kind]
	if !seen {
		k = &errorKind{}
		l.kinds[kind] = k
	}
	now := l.now()
	if seen && now.Sub(k.logged) < logEvery {
		k.suppressed++
		l.kindsMu.Unlock()
		return
	}
	suppressed := k.suppressed
	k.logged, k.suppressed = now, 0
	l.kindsMu.Unlock()
	l.out.Warn(msg, append(args, "more_since_last_logged", suppressed)...)
}
