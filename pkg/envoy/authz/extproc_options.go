package authz

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

// IdempotencyOption configures NewAuthz and NewExtProc.
type IdempotencyOption func(*idemOptions)

type idemOptions struct {
	storeTimeout time.Duration
	maxReqBody   int
	ticker       func(time.Duration) (<-chan time.Time, func())
	replay       *Replayer
	blobs        blob.Store // nil: bodies over max_body_bytes are not kept
	latency      *RouteLatency
	inFlight     inflight.Store // nil: a max_in_flight route cannot be served
	charges      chargeOptions
}

// chargeOptions are WithCharges' stores and metrics.
type chargeOptions struct {
	limits   ratelimit.Store // nil: NewAuthz's store; ext_proc cannot charge
	lockouts lockout.Store   // nil: a limit with a lockout is a store failure
	metrics  *ChargeMetrics
	secret   []byte       // WithChargeKeySecret; nil: processKeySecret
	log      *slog.Logger // WithChargeKeySecret; nil: nothing logged
	logged   *sync.Map    // shared by the servers given one WithChargeKeySecret
}

// Defaults of the options.
const (
	// DefaultStoreTimeout bounds one idempotency store call: well below
	// Envoy's ext_authz timeout (250ms in envoy/) and ext_proc
	// message_timeout (2s), so that a dead Redis is answered by the
	// route's failure mode instead of by Envoy's status_on_error.
	DefaultStoreTimeout = 100 * time.Millisecond
	// DefaultMaxRequestBody bounds the request body ext_proc buffers for a
	// fingerprint (Envoy's own buffer limit is normally far lower).
	DefaultMaxRequestBody = 16 << 20
)

func newIdemOptions(opts []IdempotencyOption) idemOptions {
	o := idemOptions{storeTimeout: DefaultStoreTimeout, maxReqBody: DefaultMaxRequestBody, ticker: realTicker}
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if o.latency == nil {
		o.latency = NewRouteLatency(nil)
	}
	return o
}

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// WithStoreTimeout bounds each idempotency store call (default
// DefaultStoreTimeout). A call that times out counts as a store failure.
func WithStoreTimeout(d time.Duration) IdempotencyOption {
	return func(o *idemOptions) {
		if d > 0 {
			o.storeTimeout = d
		}
	}
}

// WithMaxRequestBody bounds the request body ext_proc buffers for the
// fingerprint in wiring (a); a larger one is answered 413.
func WithMaxRequestBody(n int) IdempotencyOption {
	return func(o *idemOptions) {
		if n > 0 {
			o.maxReqBody = n
		}
	}
}

// WithBlobStore keeps response bodies larger than a route's max_body_bytes
// (up to its max_stored_body_bytes) in b, the record holding a reference.
// Without it (nil) such replies are completed as not replayable.
func WithBlobStore(b blob.Store) IdempotencyOption {
	return func(o *idemOptions) {
		if !envoy.IsNil(b) {
			o.blobs = b
		}
	}
}

// WithInFlight sets the store of max_in_flight slots: ext_authz takes
// slots in it, ext_proc renews and releases them. Both servers need the
// same (shared) store. Without it a route with max_in_flight is answered
// as a store failure (codes.Unavailable), never silently uncapped.
func WithInFlight(s inflight.Store) IdempotencyOption {
	return func(o *idemOptions) {
		if !envoy.IsNil(s) {
			o.inFlight = s
		}
	}
}

// WithCharges sets what the charged limits (a route limit's `charge`) are
// checked and charged in: limits, the rate-limit store (ext_authz uses its
// own when nil; ext_proc needs it to charge responses and, alone, to check
// requests), lockouts, the lockout store (needed by limits with a lockout),
// and m, where they are counted (nil: not counted). Pass the same shared
// stores to NewAuthz and NewExtProc.
func WithCharges(limits ratelimit.Store, lockouts lockout.Store, m *ChargeMetrics) IdempotencyOption {
	return func(o *idemOptions) {
		if !envoy.IsNil(limits) {
			o.charges.limits = limits
		}
		if !envoy.IsNil(lockouts) {
			o.charges.lockouts = lockouts
		}
		if m != nil {
			o.charges.metrics = m
		}
	}
}

// WithChargeKeySecret sets the HMAC key under which account names (a
// charged limit's header, form_field or json_field key) are hashed into
// their counting keys, and log, where the first unreadable key of each
// limit is logged. Every replica sharing a store needs the same secret;
// without one (or with an empty one) a random key is drawn once per
// process: right for in-process stores only. Pass it to NewAuthz and
// NewExtProc alike.
func WithChargeKeySecret(secret []byte, log *slog.Logger) IdempotencyOption {
	logged := &sync.Map{} // each unreadable key is logged once by both servers
	return func(o *idemOptions) {
		o.charges.logged = logged
		if len(secret) > 0 {
			o.charges.secret = secret
		}
		if log != nil {
			o.charges.log = log
		}
	}
}

// charger builds the charged limits' machinery of a server whose own
// rate-limit store (nil for ext_proc) is the default.
func (o idemOptions) charger(own ratelimit.Store) *charger {
	c := &charger{limits: o.charges.limits, lockouts: o.charges.lockouts, metrics: o.charges.metrics, timeout: o.storeTimeout,
		keys: &chargeKeys{secret: o.charges.secret, log: o.charges.log, logged: o.charges.logged}}
	if c.keys.logged == nil {
		c.keys.logged = &sync.Map{}
	}
	if c.keys.secret == nil {
		c.keys.secret = processKeySecret()
	}
	if c.limits == nil {
		c.limits = own
	}
	if c.metrics == nil {
		c.metrics = discardChargeMetrics()
	}
	return c
}

// WithRenewTicker replaces the ticker that paces ext_proc's lease renewals
// (every lease TTL / 3); tests drive renewals by hand with it. f returns
// the tick channel and a stop function.
func WithRenewTicker(f func(time.Duration) (<-chan time.Time, func())) IdempotencyOption {
	return func(o *idemOptions) {
		if f != nil {
			o.ticker = f
		}
	}
}

// WithReplay lets ext_authz and ext_proc replay stored replies whose body is
// in object storage: they mark the request with a ticket signed by r for
// the replay endpoint (ReplayHandler) instead of answering it themselves.
// Without it such a replay is answered 503 (idempotency-replay-unavailable).
func WithReplay(r *Replayer) IdempotencyOption {
	return func(o *idemOptions) { o.replay = r }
}

// WithRouteLatency shares l between servers: ext_proc records in it how
// long each route's leases are held, and ext_authz and ext_proc derive a
// 409's Retry-After from it. Pass the same l to NewAuthz and NewExtProc
// (without it each server keeps its own, and ext_authz, which settles no
// lease, answers every 409 with DefaultInProgressWait).
func WithRouteLatency(l *RouteLatency) IdempotencyOption {
	return func(o *idemOptions) {
		if l != nil {
			o.latency = l
		}
	}
}

// complete, release and renew are the store's writes under the timeout.
func (g *gate) complete(ctx context.Context, l idempotency.Lease, r idempotency.Response) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return g.store.Complete(ctx, l, r)
}

func (g *gate) release(ctx context.Context, l idempotency.Lease) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return g.store.Release(ctx, l)
}

func (g *gate) renew(ctx context.Context, l idempotency.Lease) error {
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return g.store.Renew(ctx, l)
}
