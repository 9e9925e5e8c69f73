package redisstore

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

//go:embed decide.lua
var decideSrc string

// decideAll is decide.lua whole: it decides a request whose limits mix
// algorithms.
var decideAll = redisscript.New(decideSrc)

// decideOnly holds, per algorithm code, decide.lua without the other
// algorithms' deciders: the script of a request whose limits all use that
// algorithm (when single.lua does not cover it). Redis then builds one
// decider's closures per call instead of four.
var decideOnly = func() map[int]redisscript.Script {
	m := make(map[int]redisscript.Script, len(algCodes))
	for alg, code := range algCodes {
		m[code] = redisscript.New(onlyBlock(decideSrc, "alg", string(alg)))
	}
	return m
}()

// onlyBlock drops from src every block between "-- >>> KIND NAME" and
// "-- <<< KIND NAME" lines whose NAME is not keep.
func onlyBlock(src, kind, keep string) string {
	var b strings.Builder
	skipping := false
	for _, line := range strings.SplitAfter(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if name, ok := strings.CutPrefix(trimmed, "-- >>> "+kind+" "); ok && name != keep {
			skipping = true
		}
		if !skipping {
			b.WriteString(line)
		}
		if name, ok := strings.CutPrefix(trimmed, "-- <<< "+kind+" "); ok && name != keep {
			skipping = false
		}
	}
	return b.String()
}

//go:embed single.lua
var singleSrc string

// decideSingle is single.lua's "single" script: one gcra or fixed_window
// limit, decided without decide.lua's per-call closures and tables (a third
// less Redis time per call; see the file).
var decideSingle = redisscript.New(onlyBlock(singleSrc, "main", "single"))

// decideBatch is single.lua's "batch" script: many requests that
// decideSingle would decide, in one call to a standalone server (see
// batchCall).
var decideBatch = redisscript.New(onlyBlock(singleSrc, "main", "batch"))

// singleCodes are the algorithm codes single.lua decides.
var singleCodes = map[int]bool{algCodes[ratelimit.GCRA]: true, algCodes[ratelimit.FixedWindow]: true}

// scriptFor picks the script for a request from its ARGV: single.lua for
// one limit it covers, else the single-algorithm script when every limit
// shares one algorithm, else decide.lua whole.
// A request charged otherwise than if admitted carries its mode after the
// limits (see appendScriptArgs); single.lua reads it for fixed_window
// charged always (envoyproxy/ratelimit's counting), and decide.lua decides
// every other mode.
func scriptFor(args []any) redisscript.Script {
	code, _ := args[argFirstLimit].(int)
	if singleDecides(args, code) {
		return decideSingle
	}
	end := argFirstLimit + (len(args)-argFirstLimit)/limitArgs*limitArgs
	for i := argFirstLimit + limitArgs; i < end; i += limitArgs {
		if c, _ := args[i].(int); c != code {
			return decideAll
		}
	}
	if s, ok := decideOnly[code]; ok {
		return s
	}
	return decideAll
}

// singleDecides reports whether single.lua decides a request of one limit
// of algorithm code: charged if admitted (no mode argument), or a
// fixed_window limit charged always.
func singleDecides(args []any, code int) bool {
	switch len(args) {
	case argFirstLimit + limitArgs:
		return singleCodes[code]
	case argFirstLimit + limitArgs + 1:
		return code == algCodes[ratelimit.FixedWindow] && args[len(args)-1] == int(ratelimit.ChargeAlways)
	}
	return false
}

// allScripts is every script the store may run, for loading up front.
func allScripts() []redisscript.Script {
	out := []redisscript.Script{decideAll, decideSingle, decideBatch, leaseScript, resetScript}
	for _, s := range decideOnly {
		out = append(out, s)
	}
	return out
}

// Scripts returns the Lua source of every script the store may run, for
// loading them (SCRIPT LOAD) on every master before traffic arrives: a
// decision whose script is not loaded costs a NOSCRIPT round trip and an
// EVAL that compiles it.
func Scripts() []string {
	var out []string
	for _, s := range allScripts() {
		out = append(out, s.Source())
	}
	return out
}

// Argument and reply layout of decide.lua. The Lua reads ARGV and builds its
// reply by these positions and codes: change both together.
const (
	// argHits and argNow come first; the limits follow, limitArgs each.
	argHits = iota
	argNow
	argFirstLimit
)

const (
	// limitArgs is the number of ARGV entries per limit: algorithm code,
	// requests, period in microseconds, burst. After the limits, a
	// request charged otherwise than if admitted has one more: its
	// ratelimit.ChargeMode as a number, which decide.lua reads.
	limitArgs = 4
	// replyHead is the all-allowed flag before the per-limit results.
	replyHead = 1
	// replyFields is the number of integers per limit in the reply:
	// allowed, limit, remaining, reset_after_us, retry_after_us.
	replyFields = 5
)

// Hash fields of the window algorithms' state (fixed_window,
// sliding_window). decide.lua names them F_WINDOW, F_COUNT, F_PREV: change
// both together. A test reads a stored hash back through these names.
const (
	// fieldWindow is the index of the counted window, floor(now / period).
	fieldWindow = "w"
	// fieldCount is the hits counted in that window.
	fieldCount = "c"
	// fieldPrev is the hits of the window before it (sliding_window).
	fieldPrev = "p"
)

// Algorithm codes: the index of the algorithm's decider in decide.lua's
// deciders table.
var algCodes = map[ratelimit.Algorithm]int{
	ratelimit.GCRA:          1,
	ratelimit.SlidingLog:    2,
	ratelimit.SlidingWindow: 3,
	ratelimit.FixedWindow:   4,
}

// ErrUnexpectedReply means Redis answered the script with a reply of the
// wrong shape: a different script under the same SHA, or a proxy in the way.
var ErrUnexpectedReply = errors.New("redisstore: unexpected script reply")

// scriptArgs builds ARGV for one request. now is a fixed instant in
// microseconds for tests, or 0 to let the script read Redis's clock.
func scriptArgs(req ratelimit.Request, now int64) []any {
	return appendScriptArgs(make([]any, 0, argFirstLimit+limitArgs*len(req.Limits)), req, now)
}

// appendScriptArgs appends req's ARGV to dst, so that a caller with room of
// its own (a call's array) builds it without allocating a slice.
func appendScriptArgs(dst []any, req ratelimit.Request, now int64) []any {
	var clock any = ""
	if now > 0 {
		clock = strconv.FormatInt(now, 10)
	}
	dst = append(dst, req.Hits, clock) // argHits, argNow
	for _, l := range req.Limits {
		dst = append(dst, algCodes[l.Algorithm.OrDefault()], l.Requests, l.Period.Microseconds(), l.Burst)
	}
	if req.Charge != ratelimit.ChargeIfAdmitted {
		dst = append(dst, int(req.Charge))
	}
	return dst
}

// parseReply turns the script's integer array into a Decision, checking
// every element's type. The Decision's Results are results, filled in: one
// per limit of the request, given by the caller so that it may pass room of
// its own.
func parseReply(v any, results []ratelimit.Result) (ratelimit.Decision, error) {
	arr, ok := v.([]any)
	if !ok {
		return ratelimit.Decision{}, fmt.Errorf("%w: %T, want array", ErrUnexpectedReply, v)
	}
	if want := replyHead + replyFields*len(results); len(arr) != want {
		return ratelimit.Decision{}, fmt.Errorf("%w: %d elements, want %d", ErrUnexpectedReply, len(arr), want)
	}
	// Room for a one-limit reply on the stack; more limits grow it.
	ints := make([]int64, 0, replyHead+replyFields)
	for i, e := range arr {
		n, ok := e.(int64)
		if !ok {
			return ratelimit.Decision{}, fmt.Errorf("%w: element %d is %T, want integer", ErrUnexpectedReply, i, e)
		}
		ints = append(ints, n)
	}
	for i := range results {
		f := ints[replyHead+replyFields*i:]
		results[i] = ratelimit.Result{
			Allowed:    f[0] == 1,
			Limit:      f[1],
			Remaining:  f[2],
			ResetAfter: time.Duration(f[3]) * time.Microsecond,
			RetryAfter: time.Duration(f[4]) * time.Microsecond,
		}
	}
	return ratelimit.Decision{Allowed: ints[0] == 1, Results: results}, nil
}
