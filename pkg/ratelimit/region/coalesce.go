package region

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/internal/redisscript"
)

// maxBatch bounds the decisions one pipeline carries (the Redis store's
// default, redisstore.DefaultMaxBatch).
const maxBatch = 128

// coalescer sends a global limit's decisions as the Redis store sends a
// regional one's: while one round trip is in flight, decisions wait; when it
// returns, they leave together as one pipeline instead of one EVALSHA each
// on a connection of their own. An idle coalescer sends at once (no
// timer), so a lone decision pays nothing; batches grow with concurrency.
// Each decision keeps its own reply and error; none is sent twice, and one
// whose context ends while it waits is not sent at all.
type coalescer struct {
	client pipelineProcessor
	// batch, when set, turns several decisions into one script call (a
	// standalone server; a cluster's keys span slots, so it never batches
	// and sends a pipeline of single calls instead).
	batch func(calls []redisscript.Call) redisscript.Call

	mu    sync.Mutex
	busy  bool // a round trip is in flight
	queue []*pending
}

// pipelineProcessor runs scripts and opens pipelines: *redis.Client and
// *redis.ClusterClient (whose pipelines go-redis splits per node).
type pipelineProcessor interface {
	redisscript.Processor
	redisscript.Pipeliner
}

// pending is one decision's trip through the coalescer.
type pending struct {
	ctx   context.Context
	call  redisscript.Call
	state atomic.Int32 // pendingQueued, then pendingSent or pendingAbandoned
	reply any
	err   error
	done  chan struct{} // closed once reply and err are set
}

func (p *pending) answer(reply any, err error) {
	p.reply, p.err = reply, err
	close(p.done)
}

const (
	pendingQueued int32 = iota
	pendingSent
	pendingAbandoned
)

// run sends call (alone, or with those that queue beside it) and returns
// its reply; ctx ending while it waits returns ctx's error unsent.
func (c *coalescer) run(ctx context.Context, call redisscript.Call) (any, error) {
	p := &pending{ctx: ctx, call: call, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if !c.busy {
		c.busy = true
		batch := c.take()
		c.mu.Unlock()
		c.fly(batch)
	} else {
		c.mu.Unlock()
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		if p.state.CompareAndSwap(pendingQueued, pendingAbandoned) {
			return nil, ctx.Err()
		}
		<-p.done // sent: its reply says what happened
	}
	return p.reply, p.err
}

// take removes up to maxBatch decisions from the queue; c.mu is held.
func (c *coalescer) take() []*pending {
	n := min(len(c.queue), maxBatch)
	batch := make([]*pending, n)
	copy(batch, c.queue)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	return batch
}

// fly sends batch, answers it, then hands what queued meanwhile to a new
// goroutine, so the caller that flew returns without waiting for it.
func (c *coalescer) fly(batch []*pending) {
	c.send(batch)
	c.mu.Lock()
	if len(c.queue) == 0 {
		c.busy = false
		c.mu.Unlock()
		return
	}
	next := c.take()
	c.mu.Unlock()
	go c.fly(next)
}

// send runs the batch's live decisions in one round trip: one command when
// alone, else one pipeline bounded by the latest of their deadlines.
func (c *coalescer) send(batch []*pending) {
	live := batch[:0:0]
	for _, p := range batch {
		if p.ctx.Err() == nil && p.state.CompareAndSwap(pendingQueued, pendingSent) {
			live = append(live, p)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		p := live[0]
		p.answer(p.call.Run(p.ctx, c.client).Result())
		return
	}
	ctx, cancel := latestDeadline(live)
	defer cancel()
	calls := make([]redisscript.Call, len(live))
	for i, p := range live {
		calls[i] = p.call
	}
	if c.batch != nil {
		answerBatch(live, c.batch(calls).Run(ctx, c.client))
		return
	}
	for i, cmd := range redisscript.RunPipeline(ctx, c.client, calls) {
		live[i].answer(cmd.Result())
	}
}

// answerBatch answers each decision from its element of the batch script's
// reply: its reply, or its own error. A failed command fails them all; none
// is sent again (it may have run).
func answerBatch(live []*pending, cmd redisscript.Cmd) {
	v, err := cmd.Result()
	arr, ok := v.([]any)
	if err == nil && (!ok || len(arr) != len(live)) {
		err = fmt.Errorf("region: batch of %d answered with %T of %d", len(live), v, len(arr))
	}
	for i, p := range live {
		switch {
		case err != nil:
			p.answer(nil, err)
		case isError(arr[i]):
			p.answer(nil, arr[i].(error))
		default:
			p.answer(arr[i], nil)
		}
	}
}

func isError(v any) bool {
	_, ok := v.(error)
	return ok
}

// latestDeadline bounds a pipeline by the latest deadline among its
// decisions, so no decision's own deadline is cut short by another's (each
// caller still stops waiting at its own); none when one has none.
// Cancellation is not inherited: one caller giving up must not fail the
// others' commands.
func latestDeadline(live []*pending) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range live {
		d, ok := p.ctx.Deadline()
		if !ok {
			return context.Background(), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
