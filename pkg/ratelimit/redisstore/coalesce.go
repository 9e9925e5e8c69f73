package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// DefaultMaxBatch bounds how many decisions go out in one pipeline when
// Options.MaxBatch is 0.
const DefaultMaxBatch = 128

// Coalescing: while one round trip to a Redis node is in flight, the
// decisions for that node wait in its lane; when the round trip returns,
// they leave together as one pipeline (one write, one read) instead of one
// EVALSHA each. There is no timer: an idle lane sends a decision at once,
// so a lone call pays nothing, and the batches grow only with concurrency.
// Every decision keeps its own script, its own reply and its own error; a
// command is never sent twice, and a decision whose context ends while it
// waits is not sent at all.

// lane queues the decisions bound for one Redis node.
type lane struct {
	mu    sync.Mutex
	busy  bool // a round trip is in flight
	queue []*call
}

// call is one request's trip through a lane.
type call struct {
	ctx   context.Context
	asked time.Time // when the decision was asked for: CallTimeout counts from here
	keys  []string
	args  []any
	state atomic.Int32 // callQueued, then callSent or callAbandoned
	done  chan struct{}
	// Set before done is closed. dec is an array so that a lone call
	// returns its decision as a slice without allocating one.
	dec [1]ratelimit.Decision
	err error
	// results is the room parseReply fills, one per limit.
	results []ratelimit.Result
	// The room of a one-limit request, the common case: its keys, args
	// and results live in the call, which is then one allocation (with
	// its done channel) instead of five. The decision returned holds the
	// call alive; whoever keeps one past the request copies its results
	// (package overlimit does).
	oneKey    [1]string
	oneArgs   [argFirstLimit + limitArgs + 1]any // + 1: a charge mode
	oneResult [1]ratelimit.Result
}

const (
	callQueued int32 = iota
	callSent
	callAbandoned
)

// masterForKeyer is how a cluster client names the node of a key's slot.
type masterForKeyer interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// allowCoalesced decides reqs through the lanes of their nodes and waits
// for every answer. reqs are valid.
func (s *Store) allowCoalesced(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	now, asked := s.fixedNow(), time.Now()
	if len(reqs) == 1 { // the common case, without the grouping's slices
		c := s.newCall(ctx, reqs[0], now, asked)
		l := s.laneOf(ctx, c.keys[0])
		if batch := s.enqueue(l, c); batch != nil {
			s.fly(l, batch)
		}
		if err := c.wait(); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
		return c.dec[:], nil
	}
	calls := make([]*call, len(reqs))
	for i, r := range reqs {
		calls[i] = s.newCall(ctx, r, now, asked)
	}
	// Group by lane first, so one caller's calls to a node leave together.
	var lanes []*lane
	var groups [][]*call
	for _, c := range calls {
		l := s.laneOf(ctx, c.keys[0])
		i := slices.Index(lanes, l)
		if i < 0 {
			i = len(lanes)
			lanes, groups = append(lanes, l), append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	// An idle lane's first batch holds only this caller's calls, bound by
	// its own context: fly the last from here, the others alongside.
	for i, l := range lanes {
		batch := s.enqueue(l, groups[i]...)
		switch {
		case batch == nil:
		case i == len(lanes)-1:
			s.fly(l, batch)
		default:
			go s.fly(l, batch)
		}
	}
	out := make([]ratelimit.Decision, len(reqs))
	for i, c := range calls {
		if err := c.wait(); err != nil {
			return nil, fmt.Errorf("redisstore: request %d: %w", i, err)
		}
		out[i] = c.dec[0]
	}
	return out, nil
}

func (s *Store) newCall(ctx context.Context, r ratelimit.Request, now int64, asked time.Time) *call {
	c := &call{ctx: ctx, asked: asked, done: make(chan struct{})}
	if len(r.Limits) == 1 {
		c.keys = appendRequestKeys(c.oneKey[:0], s.prefix, r)
		c.args = appendScriptArgs(c.oneArgs[:0], r, now)
		c.results = c.oneResult[:]
		return c
	}
	c.keys, c.args = requestKeys(s.prefix, r), scriptArgs(r, now)
	c.results = make([]ratelimit.Result, len(r.Limits))
	return c
}

// wait returns once the call has its answer or its context ends. A call
// abandoned before it was sent is never sent; one already sent may have
// run, as with any command whose reply is lost.
func (c *call) wait() error {
	select {
	case <-c.done:
		return c.err
	case <-c.ctx.Done():
		c.state.CompareAndSwap(callQueued, callAbandoned)
		return c.ctx.Err()
	}
}

// laneOf returns the lane of the node that serves key: one lane per master
// on a cluster, a single lane otherwise. A cluster whose layout cannot be
// read yet shares one lane; the cluster pipeline still routes each command.
func (s *Store) laneOf(ctx context.Context, key string) *lane {
	var node any
	if mk, ok := s.client.(masterForKeyer); ok {
		if c, err := mk.MasterForKey(ctx, key); err == nil {
			node = c
		}
	}
	if l, ok := s.lanes.Load(node); ok {
		return l.(*lane)
	}
	l, _ := s.lanes.LoadOrStore(node, &lane{})
	return l.(*lane)
}

// enqueue queues calls on l. When no round trip is in flight there, it
// marks one started and returns the batch for the caller to fly.
func (s *Store) enqueue(l *lane, calls ...*call) []*call {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, calls...)
	if l.busy {
		return nil
	}
	l.busy = true
	return l.take(s.maxBatch)
}

// take removes up to most calls from the head of the queue. l.mu is held.
func (l *lane) take(most int) []*call {
	n := min(len(l.queue), most)
	batch := make([]*call, n)
	copy(batch, l.queue)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	return batch
}

// fly sends batch, answers its calls, then hands what queued meanwhile to a
// new goroutine, so the caller that flew returns without waiting for it.
func (s *Store) fly(l *lane, batch []*call) {
	s.send(batch)
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.busy = false
		l.mu.Unlock()
		return
	}
	next := l.take(s.maxBatch)
	l.mu.Unlock()
	go s.fly(l, next)
}

// send runs the batch's live calls in one round trip (one pipeline, or one
// command when alone) and answers each.
func (s *Store) send(batch []*call) {
	live := batch[:0:0]
	for _, c := range batch {
		if c.ctx.Err() == nil && c.state.CompareAndSwap(callQueued, callSent) {
			live = append(live, c)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		ctx, cancel := s.bound(c.ctx, c.asked)
		defer cancel()
		cmd := scriptFor(c.args).Run(ctx, s.client, c.keys, c.args)
		c.answer(cmd.Result())
		return
	}
	ctx, cancel := batchContext(live, s.timeout)
	defer cancel()
	s.sendTogether(ctx, live)
}

// sendTogether sends live calls in one pipeline: on a standalone server,
// those single.lua decides as one batch script call, the others as a
// script call each.
func (s *Store) sendTogether(ctx context.Context, live []*call) {
	var together, apart []*call
	if s.batchScripts {
		together, apart = splitBatchable(live)
	}
	if len(together) < 2 {
		together, apart = nil, live
	}
	calls := make([]redisscript.Call, 0, len(apart)+1)
	for _, c := range apart {
		calls = append(calls, redisscript.Call{Script: scriptFor(c.args), Keys: c.keys, Args: c.args})
	}
	if together != nil {
		calls = append(calls, batchCall(together))
	}
	cmds := redisscript.RunPipeline(ctx, s.client, calls)
	for i, c := range apart {
		c.answer(cmds[i].Result())
	}
	if together != nil {
		answerBatch(together, cmds[len(apart)])
	}
}

// splitBatchable separates the calls single.lua decides (one gcra or
// fixed_window limit), which can share one batch script call, from the
// others.
func splitBatchable(live []*call) (together, apart []*call) {
	for _, c := range live {
		if scriptFor(c.args) == decideSingle {
			together = append(together, c)
		} else {
			apart = append(apart, c)
		}
	}
	return together, apart
}

// batchCall is one call of single.lua's batch script deciding every call
// in calls (each one limit): KEYS is their keys in order; ARGV is the shared
// clock, then each call's hits, limit and charge mode.
func batchCall(calls []*call) redisscript.Call {
	keys := make([]string, len(calls))
	args := make([]any, 1, 1+len(calls)*(2+limitArgs))
	args[0] = calls[0].args[argNow] // the store's clock: the same in every call
	for i, c := range calls {
		keys[i] = c.keys[0]
		args = append(args, c.args[argHits])
		args = append(args, c.args[argFirstLimit:argFirstLimit+limitArgs]...)
		mode := any(int(ratelimit.ChargeIfAdmitted))
		if len(c.args) > argFirstLimit+limitArgs {
			mode = c.args[argFirstLimit+limitArgs]
		}
		args = append(args, mode)
	}
	return redisscript.Call{Script: decideBatch, Keys: keys, Args: args}
}

// answerBatch answers each call from its element of the batch script's
// reply: its decision, or its own error. A failed command fails them all;
// none is sent again (it may have run).
func answerBatch(calls []*call, cmd redisscript.Cmd) {
	v, err := cmd.Result()
	arr, ok := v.([]any)
	if err == nil && (!ok || len(arr) != len(calls)) {
		err = fmt.Errorf("%w: batch of %d answered with %T of %d", ErrUnexpectedReply, len(calls), v, len(arr))
	}
	for i, c := range calls {
		if err != nil {
			c.answer(nil, err)
			continue
		}
		if e, isErr := arr[i].(error); isErr {
			c.answer(nil, e)
			continue
		}
		c.answer(arr[i], nil)
	}
}

// answer parses the reply and wakes the caller.
func (c *call) answer(v any, err error) {
	if err == nil {
		c.dec[0], c.err = parseReply(v, c.results)
	} else {
		c.err = err
	}
	close(c.done)
}

// batchContext bounds a pipeline by the latest deadline among its calls, so
// no call's own deadline is cut short by another's; each caller still
// stops waiting at its own deadline. Cancellation is not inherited: one
// caller giving up must not fail the others' commands. With a CallTimeout,
// the pipeline also ends when the call asked for first reaches it: every
// call then waits at most CallTimeout from its asking, and the round trip
// pays for one context and timer, not one per call.
func batchContext(calls []*call, timeout time.Duration) (context.Context, context.CancelFunc) {
	var latest, first time.Time
	bounded := true // every call has a deadline of its own
	for _, c := range calls {
		if first.IsZero() || c.asked.Before(first) {
			first = c.asked
		}
		d, ok := c.ctx.Deadline()
		bounded = bounded && ok
		if ok && d.After(latest) {
			latest = d
		}
	}
	base := context.WithoutCancel(calls[0].ctx)
	if timeout > 0 && (!bounded || first.Add(timeout).Before(latest)) {
		latest, bounded = first.Add(timeout), true
	}
	if !bounded {
		return base, func() {}
	}
	return context.WithDeadline(base, latest)
}
