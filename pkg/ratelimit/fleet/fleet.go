// Package fleet counts the extauthz replicas that share one Redis keyspace,
// so that each replica's fail-open fallback can take its share of every
// limit (package failover, Options.Replicas) when Redis fails.
//
// Each replica beats every Interval, off the request path: one Lua script on
// one key, <prefix>:replicas, a sorted set whose members are replica IDs
// scored by their expiry (Redis's clock, now + TTL). The script drops the
// expired members, adds or refreshes this one and returns how many are
// live. One key is one hash slot, so it runs unchanged on a Redis Cluster,
// and counting needs no SCAN. The replicas counted are exactly those
// sharing the prefix, which are those sharing the limits' state.
//
// Count is the last count a beat returned. While Redis is down beats fail
// and Count keeps the count seen before the outage: that is what the
// fallback divides by. A replica that stops cleanly (Close) removes itself;
// one that dies is forgotten TTL after its last beat.
package fleet

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redisscript"
)

var (
	//go:embed beat.lua
	beatSrc string
	// beatScript may run twice harmlessly (a later expiry for the same
	// member), but goes through the project's one script runner all the
	// same.
	beatScript = redisscript.New(beatSrc)
)

// Scripts returns the Lua sources a Presence runs, for redisclient.Warm.
func Scripts() []string { return []string{beatScript.Source()} }

// Defaults for zero Options fields.
const (
	DefaultInterval = 2 * time.Second
	// DefaultTTLBeats is the TTL in beats: a replica is forgotten after
	// missing this many in a row, so one slow beat does not drop it.
	DefaultTTLBeats = 3
)

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid fleet options")

// Options configures a Presence.
type Options struct {
	// Prefix starts the key, <prefix>:replicas; default redisclient's "xa".
	// No '{' or '}'.
	Prefix string
	// ID names this replica in the set; default host name, process ID and
	// 8 random bytes, unique per process.
	ID string
	// Interval is the time between beats; default DefaultInterval (2s).
	Interval time.Duration
	// TTL is how long a beat keeps this replica counted; default
	// DefaultTTLBeats intervals. At least Interval.
	TTL time.Duration
	// Registerer receives the metrics; required.
	Registerer prometheus.Registerer
	// Now is the clock scripts use; nil means Redis's own (tests pass one).
	Now func() time.Time
	// OnError, when set, is told of every failed beat; callers log it.
	OnError func(error)
}

// Presence registers this replica and counts the live ones.
type Presence struct {
	client   redisscript.Processor
	key, id  string
	interval time.Duration
	ttlMS    string
	now      func() time.Time
	onError  func(error)
	count    atomic.Int64
	joined   atomic.Bool // a beat was sent: Close has something to remove
	seen     prometheus.Gauge

	stop      chan struct{}
	done      chan struct{}
	startOnce sync.Once
	closeOnce sync.Once
}

// New returns a Presence on client (standalone or cluster). It does not
// contact Redis until the first beat.
func New(client redisscript.Processor, opts Options) (*Presence, error) {
	opts, err := withDefaults(client, opts)
	if err != nil {
		return nil, err
	}
	p := &Presence{
		client: client, key: opts.Prefix + ":replicas", id: opts.ID, interval: opts.Interval,
		ttlMS: strconv.FormatInt(opts.TTL.Milliseconds(), 10), now: opts.Now, onError: opts.OnError,
		seen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "extauthz_redis_replicas_seen",
			Help: "Live extauthz replicas sharing this Redis key prefix, as last counted (this one included); 0 until the first count.",
		}),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if err := opts.Registerer.Register(p.seen); err != nil {
		return nil, fmt.Errorf("fleet metrics: %w", err)
	}
	if p.onError == nil {
		p.onError = func(error) {}
	}
	return p, nil
}

func withDefaults(client redisscript.Processor, o Options) (Options, error) {
	prefix, err := redisclient.KeyPrefix(o.Prefix)
	if err != nil {
		return o, fmt.Errorf("%w: %v", ErrInvalidOptions, err)
	}
	o.Prefix = prefix
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTLBeats * o.Interval
	}
	switch {
	case client == nil:
		return o, fmt.Errorf("%w: nil client", ErrInvalidOptions)
	case o.Registerer == nil:
		return o, fmt.Errorf("%w: nil Registerer", ErrInvalidOptions)
	case o.Interval < time.Millisecond || o.TTL < o.Interval:
		return o, fmt.Errorf("%w: Interval must be at least 1ms and TTL at least Interval, got %s and %s", ErrInvalidOptions, o.Interval, o.TTL)
	}
	if o.ID == "" {
		o.ID = defaultID()
	}
	return o, nil
}

// defaultID is unique per process: a restarted replica is a new member,
// and the old one's expires.
func defaultID() string {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}

// Key is the sorted set's key.
func (p *Presence) Key() string { return p.key }

// Count is the live replicas last counted, this one included; 0 before the
// first successful beat.
func (p *Presence) Count() int { return int(p.count.Load()) }

// Beat registers this replica until now + TTL, counts the live ones and
// keeps the count. A failed beat keeps the previous count.
func (p *Presence) Beat(ctx context.Context) (int, error) {
	p.joined.Store(true)
	n, err := beatScript.Run(ctx, p.client, []string{p.key}, []any{p.id, p.ttlMS, p.nowArg()}).Int64()
	if err != nil {
		return p.Count(), fmt.Errorf("fleet: beat: %w", err)
	}
	p.count.Store(n)
	p.seen.Set(float64(n))
	return int(n), nil
}

func (p *Presence) nowArg() string {
	if p.now == nil {
		return ""
	}
	return strconv.FormatInt(p.now().UnixMilli(), 10)
}

// Start beats at once and then every Interval on a goroutine, until Close.
// Each beat is bounded by the interval. Calling it again does nothing.
func (p *Presence) Start() {
	p.startOnce.Do(func() { go p.run() })
}

func (p *Presence) run() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), p.interval)
		if _, err := p.Beat(ctx); err != nil {
			p.onError(err)
		}
		cancel()
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

// leaveTimeout bounds Close's removal of this replica: on a dead Redis the
// replica is forgotten at its TTL instead.
const leaveTimeout = time.Second

// Close stops the beats and removes this replica from the set, so that
// the others count one fewer at their next beat; a failed removal goes to
// OnError (the replica is then forgotten at its TTL). Safe to call twice;
// it does not close the client. A Presence that never beat sends nothing.
func (p *Presence) Close() {
	p.closeOnce.Do(func() {
		close(p.stop)
		p.startOnce.Do(func() { close(p.done) }) // never started: nothing to wait for
		<-p.done
		if !p.joined.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		defer cancel()
		cmd := redis.NewIntCmd(ctx, "zrem", p.key, p.id)
		_ = p.client.Process(ctx, cmd)
		if err := cmd.Err(); err != nil {
			p.onError(fmt.Errorf("fleet: leave: %w", err))
		}
	})
}
