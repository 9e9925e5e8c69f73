package quota

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// TokenBucket is a share as a token bucket that Envoy's rate_limit_quota
// filter enforces: TokensPerFill tokens every FillInterval, continuously
// (Envoy refills at TokensPerFill / FillInterval per second), holding at most
// MaxTokens. It mirrors envoy.type.v3.TokenBucket without importing it.
type TokenBucket struct {
	// DenyAll means the share is zero or too small to express (under one
	// token per SlowInterval): deny every request. The other fields are
	// then zero.
	DenyAll bool
	// TokensPerFill is at least 1 unless DenyAll.
	TokensPerFill uint32
	// FillInterval is a whole number of seconds, at least one: Envoy 1.40
	// truncates the interval to whole seconds, and an interval of 0 admits
	// everything.
	FillInterval time.Duration
	// MaxTokens is the burst, at least 1 unless DenyAll. Envoy 1.40 starts a
	// token bucket full when it replaces no assignment or a blanket rule (a
	// first assignment, an expired one's fallback, ALLOW_ALL, DENY_ALL), so
	// a client may admit MaxTokens at once then; one that replaces a token
	// bucket does not start full (measured: docs/rlqs.md).
	MaxTokens uint32
}

// Rate is the enforced rate in tokens per second; 0 for DenyAll.
func (b TokenBucket) Rate() float64 {
	if b.DenyAll || b.FillInterval < time.Second {
		return 0
	}
	return float64(b.TokensPerFill) / b.FillInterval.Seconds()
}

// BucketOptions shape the token buckets. The zero value is the defaults.
type BucketOptions struct {
	// SlowInterval is the fill interval of shares under FastRate tokens per
	// second; default 60s. Whole seconds from 2s to 1000s. Shares under one
	// token per SlowInterval are DenyAll.
	SlowInterval time.Duration
	// Burst sizes MaxTokens: the share times Burst, rounded down, at least
	// one token; default 1s, at least 1s.
	Burst time.Duration
}

// Defaults and bounds of BucketOptions.
const (
	DefaultSlowInterval = 60 * time.Second
	DefaultBurst        = time.Second
	minSlowInterval     = 2 * time.Second
	maxSlowInterval     = 1000 * time.Second
)

// FastRate is the share, in tokens per second, from which buckets use a
// one-second fill interval: rounding down to whole tokens per second then
// loses under 0.1 %. Below it SlowInterval keeps the rounding loss under one
// token per SlowInterval.
const FastRate = 1000

// ErrInvalidOptions means options are out of range; the message says which.
var ErrInvalidOptions = errors.New("quota: invalid options")

// Validate reports every field out of range (zero values are valid: they
// take the defaults).
func (o BucketOptions) Validate() error {
	var errs []error
	if s := o.SlowInterval; s != 0 && (s%time.Second != 0 || s < minSlowInterval || s > maxSlowInterval) {
		errs = append(errs, fmt.Errorf("%w: SlowInterval must be whole seconds from %s to %s, got %s",
			ErrInvalidOptions, minSlowInterval, maxSlowInterval, s))
	}
	if b := o.Burst; b != 0 && b < time.Second {
		errs = append(errs, fmt.Errorf("%w: Burst must be at least 1s, got %s", ErrInvalidOptions, b))
	}
	return errors.Join(errs...)
}

// withDefaults fills zero fields and forces the others into range (whole
// seconds rounded up), so that BucketFor never builds an unenforceable bucket.
func (o BucketOptions) withDefaults() BucketOptions {
	if o.SlowInterval == 0 {
		o.SlowInterval = DefaultSlowInterval
	}
	if r := o.SlowInterval % time.Second; r != 0 {
		o.SlowInterval += time.Second - r
	}
	o.SlowInterval = min(max(o.SlowInterval, minSlowInterval), maxSlowInterval)
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	o.Burst = max(o.Burst, time.Second)
	return o
}

// BucketFor converts a share (tokens per second) to the token bucket that
// enforces it. The bucket never fills faster than the share:
// TokensPerFill / FillInterval <= rate, exactly.
//
// Burst allowance: MaxTokens is max(1, floor(rate*Burst)), and Envoy starts
// a token bucket full when it replaces no assignment or a blanket rule
// (1.40 does not when it replaces a token bucket; the bound below does not
// rely on it). So over any t seconds a client admits
// at most rate*t plus MaxTokens per assignment it installs in that time, and
// across the clients of one allocation (shares summing to at most the
// budget) the allowance on top of budget*t is at most budget*Burst plus one
// token per client whose share is under 1/Burst per second, per round of
// installed assignments. With the defaults: one second of the budget.
//
// The fill interval is 1s from FastRate up and SlowInterval below, never
// anything else: fractional rates get a longer interval, never a shorter
// one (0.5/s is 30 tokens per 60s). Two intervals only, because Envoy 1.40
// compares a new assignment to the old by tokens_per_fill, max_tokens and
// the nanoseconds of the interval: one that differs only in the seconds is
// taken as unchanged and not installed. With these rules, two buckets with
// equal TokensPerFill and MaxTokens always have equal intervals (a bucket
// at FastRate or above has MaxTokens >= TokensPerFill; one below, with the
// same TokensPerFill, has fewer).
func BucketFor(rate float64, o BucketOptions) TokenBucket {
	o = o.withDefaults()
	if math.IsNaN(rate) || rate <= 0 {
		return TokenBucket{DenyAll: true}
	}
	interval := o.SlowInterval
	if rate >= FastRate {
		interval = time.Second
	}
	tokens := floorProduct(rate, interval.Seconds())
	if tokens < 1 {
		return TokenBucket{DenyAll: true}
	}
	burst := max(1, floorProduct(rate, o.Burst.Seconds()))
	return TokenBucket{TokensPerFill: clampUint32(tokens), FillInterval: interval, MaxTokens: clampUint32(burst)}
}

// floorProduct is floor(a*b) of the exact product: the rounded product may
// land on an integer just above it, which would assign a few ulps more than
// the share.
func floorProduct(a, b float64) float64 {
	p := math.Floor(a * b)
	if p > 0 && !math.IsInf(p, 0) && math.FMA(a, b, -p) < 0 {
		p--
	}
	return p
}

func clampUint32(x float64) uint32 {
	if x >= math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(x)
}

// MaterialIncrease is the relative rise of a client's rate under which a new
// assignment is not worth pushing.
const MaterialIncrease = 0.10

// Material reports whether a client holding assignment old should be sent
// next: whenever it flips between deny-all and a bucket, whenever its rate
// falls (a client left above its new share would let the clients' sum
// exceed the budget), and when its rate rises by more than
// MaterialIncrease (smaller rises cost a message per client and interval
// for little: the client is under-admitted by under 10 % until then).
// old is the last assignment the client was sent.
func Material(old, next TokenBucket) bool {
	if old.DenyAll != next.DenyAll {
		return true
	}
	o, n := old.Rate(), next.Rate()
	return n < o || n > o*(1+MaterialIncrease)
}
