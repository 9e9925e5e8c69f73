package region

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
)

var (
	//go:embed local_decide.lua
	localDecideSrc string
	//go:embed local_decide_batch.lua
	localDecideBatchMain string
	//go:embed local_claim.lua
	localClaimSrc string
	//go:embed local_setcap.lua
	localSetcapSrc string
	//go:embed local_quota.lua
	localQuotaSrc string

	localDecideScript = redisscript.New(localDecideSrc)
	// The batch script: local_decide.lua's functions, then its own main.
	localDecideBatchScript = redisscript.New(decideFunctions() + localDecideBatchMain)
	localClaimScript       = redisscript.New(localClaimSrc)
	localSetcapScript      = redisscript.New(localSetcapSrc)
	localQuotaScript       = redisscript.New(localQuotaSrc)
)

// decideFunctions is local_decide.lua up to its main: the functions the
// batch script runs too. The file is embedded, so a missing marker is a
// build mistake, found when the package loads.
func decideFunctions() string {
	funcs, _, found := strings.Cut(localDecideSrc, "-- >>> main")
	if !found {
		panic("region: local_decide.lua has no \"-- >>> main\" line")
	}
	return funcs
}

// ErrNotOwner is returned by a cap write from a replica that no longer
// holds the key's exchanger lease: another replica exchanges it now.
var ErrNotOwner = errors.New("region: exchanger lease held by another replica")

// Result is one local decision.
type Result struct {
	Allowed bool
	// Cap is what the region may admit in the current window:
	// max(its grant, its floor).
	Cap int64
	// Remaining is what is left of Cap in the window.
	Remaining int64
	// ResetAfter is the time to the end of the window.
	ResetAfter time.Duration
}

// Local is one region's state in its own Redis: per key, the caps the
// exchanger wrote, the hits admitted per window and the hits asked. Safe
// for concurrent use.
type Local struct {
	client redisscript.Processor
	prefix string
	now    clock
	// decisions, coalesced as the Redis store's are (nil: a client that
	// opens no pipelines sends each on its own).
	decisions *coalescer
}

// NewLocal returns a Local over the region's client with key prefix prefix
// (default "xa"). It does not contact Redis.
func NewLocal(client redisscript.Processor, prefix string) (*Local, error) {
	if client == nil {
		return nil, errors.New("region: nil local client")
	}
	p, err := prefixOrDefault(prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	l := &Local{client: client, prefix: p}
	if pc, ok := client.(pipelineProcessor); ok {
		l.decisions = &coalescer{client: pc}
		if _, cluster := client.(*redis.ClusterClient); !cluster {
			l.decisions.batch = batchDecisions
		}
	}
	return l, nil
}

// batchDecisions is one call of the batch script deciding every call's key
// (each a single decide call): ARGV is the first call's clock, then each
// call's ARGV but its clock.
func batchDecisions(calls []redisscript.Call) redisscript.Call {
	keys := make([]string, len(calls))
	args := make([]any, 1, 1+5*len(calls))
	args[0] = calls[0].Args[4] // the store's clock: "" (Redis's) in production
	for i, c := range calls {
		keys[i] = c.Keys[0]
		args = append(args, c.Args[0], c.Args[1], c.Args[2], c.Args[3], c.Args[5])
	}
	return redisscript.Call{Script: localDecideBatchScript, Keys: keys, Args: args}
}

// Key is the region's hash of a key.
func (l *Local) Key(k string) string { return key(l.prefix, "rgl", k) }

// Decide admits hits of key k when the region's cap for the current window
// has room: one script on the region's Redis, nothing across regions.
//
// mode is how hits are charged, as ratelimit.ChargeMode says: "i" if
// admitted (the default), "n" never (a check), "a" always (negative hits
// refund), "r" reserve (admit on one hit left, charge all). Only "i" and
// "n" keep the bound strict: "a" charges a cost known after the fact even
// past the cap, "r" may pass it by one reservation.
func (l *Local) Decide(ctx context.Context, k string, r Rule, t Topology, hits int64, mode string) (Result, error) {
	if hits < 0 && mode != "a" {
		return Result{}, fmt.Errorf("%w: hits must not be negative, got %d", ErrInvalid, hits)
	}
	if mode == "" {
		mode = "i"
	}
	args := []any{i64(hits), i64(r.PeriodMS()), i64(r.FloorHits()), ms(keyTTL(r, t)), l.now.arg(), mode}
	call := redisscript.Call{Script: localDecideScript, Keys: []string{l.Key(k)}, Args: args}
	var v any
	var err error
	if l.decisions != nil {
		v, err = l.decisions.run(ctx, call)
	} else {
		v, err = call.Run(ctx, l.client).Result()
	}
	if err != nil {
		return Result{}, fmt.Errorf("region: decide: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 4 {
		return Result{}, fmt.Errorf("region: decide: malformed reply %v", v)
	}
	n := make([]int64, 4)
	for i, x := range a {
		n[i], _ = x.(int64)
	}
	return Result{Allowed: n[0] == 1, Cap: n[1], Remaining: n[2], ResetAfter: time.Duration(n[3]) * time.Millisecond}, nil
}

// claimed is what claim reads: the region store's now, the hits asked so
// far, the hits admitted and reserved for RLQS in the current window, and
// the RLQS Envoys' live demand (hits per window; 0 when none).
type claimed struct {
	now           time.Time
	asked, window int64
	used          int64
	quota         float64
}

// claim takes or renews owner's exchanger lease of k; ok false when another
// replica holds the lease.
func (l *Local) claim(ctx context.Context, k, owner string, r Rule, t Topology) (c claimed, ok bool, err error) {
	args := []any{owner, ms(3 * t.Interval), ms(keyTTL(r, t)), l.now.arg(), i64(r.PeriodMS())}
	v, err := localClaimScript.Run(ctx, l.client, []string{l.Key(k)}, args).Result()
	if err != nil {
		return claimed{}, false, fmt.Errorf("region: claim: %w", err)
	}
	a := strs(v)
	if len(a) == 1 && a[0] == "0" {
		return claimed{}, false, nil
	}
	if len(a) != 5 {
		return claimed{}, false, fmt.Errorf("region: claim: malformed reply %q", a)
	}
	var n [3]int64
	for i, s := range a[1:4] {
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return claimed{}, false, fmt.Errorf("region: claim: malformed reply %q", a)
		}
	}
	now := time.UnixMilli(n[0])
	c = claimed{now: now, asked: n[1], used: n[2], window: r.Window(now)}
	if a[4] != "" {
		if c.quota, err = strconv.ParseFloat(a[4], 64); err != nil || c.quota < 0 {
			return claimed{}, false, fmt.Errorf("region: claim: malformed reply %q", a)
		}
	}
	return c, true, nil
}

// reserve raises the hits reserved for the region's RLQS Envoys of k
// towards want in the current window, and in the next one when it starts
// within horizon, as far as each window's cap leaves room (local_quota.lua),
// and records their demand (hits per window; negative: leave it). It
// returns the least reservation of those windows: what assignments made
// now may use.
func (l *Local) reserve(ctx context.Context, k string, r Rule, t Topology, want int64, demand float64, horizon time.Duration) (int64, error) {
	d := ""
	if demand >= 0 {
		d = strconv.FormatFloat(demand, 'f', 3, 64)
	}
	args := []any{i64(r.PeriodMS()), i64(r.FloorHits()), ms(keyTTL(r, t)), l.now.arg(), ms(horizon), i64(want), d, ms(demandTTL(t))}
	v, err := localQuotaScript.Run(ctx, l.client, []string{l.Key(k)}, args).Result()
	if err != nil {
		return 0, fmt.Errorf("region: reserve: %w", err)
	}
	a := strs(v)
	if len(a) != 1 {
		return 0, fmt.Errorf("region: reserve: malformed reply %q", a)
	}
	got, err := strconv.ParseInt(a[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("region: reserve: malformed reply %q", a)
	}
	return got, nil
}

// setCaps writes the caps of windows w and w+1: "lower" never raises a cap
// nor drops it below what the window admitted; "mirror" copies the global
// grants. It returns the caps written.
func (l *Local) setCaps(ctx context.Context, k, owner, mode string, r Rule, t Topology, w, c0, c1 int64) (int64, int64, error) {
	args := []any{owner, mode, i64(w), i64(c0), i64(c1), ms(keyTTL(r, t)), l.now.arg()}
	v, err := localSetcapScript.Run(ctx, l.client, []string{l.Key(k)}, args).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("region: set caps: %w", err)
	}
	a := strs(v)
	if len(a) == 1 && a[0] == "-1" {
		return 0, 0, ErrNotOwner
	}
	if len(a) != 3 {
		return 0, 0, fmt.Errorf("region: set caps: malformed reply %q", a)
	}
	n0, err1 := strconv.ParseInt(a[1], 10, 64)
	n1, err2 := strconv.ParseInt(a[2], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("region: set caps: malformed reply %q", a)
	}
	return n0, n1, nil
}

// resetCount forgets what the region admitted of k in the window that now
// holds (by the region's Redis clock).
func (l *Local) resetCount(ctx context.Context, k string, r Rule) error {
	now, err := l.storeNow(ctx)
	if err != nil {
		return err
	}
	cmd := redis.NewIntCmd(ctx, "hdel", l.Key(k), "u:"+i64(r.Window(now)))
	if err := l.client.Process(ctx, cmd); err != nil {
		return fmt.Errorf("region: reset: %w", err)
	}
	return nil
}

// storeNow is the region Redis's clock (or the test clock).
func (l *Local) storeNow(ctx context.Context) (time.Time, error) {
	if l.now != nil {
		return l.now(), nil
	}
	cmd := redis.NewTimeCmd(ctx, "time")
	if err := l.client.Process(ctx, cmd); err != nil {
		return time.Time{}, fmt.Errorf("region: time: %w", err)
	}
	return cmd.Val(), nil
}
