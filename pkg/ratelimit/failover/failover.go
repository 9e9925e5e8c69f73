// Package failover decides what a rate-limit Store answers when its primary
// (Redis) fails: in Open mode an in-process fallback store decides, each
// replica under its share of every limit (the limit divided by the number
// of replicas, Options.Replicas, so that the fleet stays near the limit),
// in Closed mode every request is denied. A circuit breaker
// stops sending to a primary that keeps failing, probes it after a
// cool-down with one call, and recovers by itself.
//
// A primary spread over several nodes (a Redis Cluster; see Router) gets
// one breaker per node: a failing master affects only the keys it holds,
// and its failures ask the primary to refresh its key-to-node map, so that
// once a replica is promoted its keys route to it (a new node, with a
// closed breaker) without waiting for the old node's cool-down; the old
// node's breaker is then forgotten. An answer that is the cluster's state
// (CLUSTERDOWN, which every master of a cluster with
// cluster-require-full-coverage yes gives until the replica is promoted)
// goes to the failure mode without counting against the node that gave it,
// so healthy masters decide again the moment the cluster is ok.
//
// Only backend failures fall back: invalid input is returned to the caller,
// and a caller that went away gets its context error.
package failover

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/breaker"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Mode says what to answer while the primary fails.
type Mode string

const (
	// Open decides with the fallback store, which holds this replica's
	// share of each limit (share.go): a conservative guard, since it
	// cannot see the shared count. The default.
	Open Mode = "open"
	// Closed denies every request.
	Closed Mode = "closed"
)

// ParseMode accepts "open", "closed" and "" (Open).
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", Open:
		return Open, nil
	case Closed:
		return Closed, nil
	}
	return "", fmt.Errorf("%w: failure mode %q, want open or closed", ErrInvalidOptions, s)
}

// ErrInvalidOptions means New was given unusable Options.
var ErrInvalidOptions = errors.New("invalid failover options")

// Defaults for zero Options fields (the threshold and cool-down are every
// store guard's).
const (
	DefaultFailureThreshold = breaker.DefaultThreshold
	DefaultCoolDown         = breaker.DefaultCoolDown
	DefaultDeniedRetryAfter = time.Second
)

// Options configures a Store.
type Options struct {
	// Mode is Open (default) or Closed.
	Mode Mode
	// Fallback decides while the primary fails in Open mode; required then.
	Fallback ratelimit.Store
	// Registerer receives the metrics; required.
	Registerer prometheus.Registerer
	// FailureThreshold is how many failures in a row open the circuit;
	// default 5.
	FailureThreshold int
	// CoolDown is how long an open circuit skips the primary before one
	// probe call; default 1s.
	CoolDown time.Duration
	// DeniedRetryAfter is the RetryAfter of Closed-mode denials; default 1s.
	DeniedRetryAfter time.Duration
	// CallTimeout bounds each call to the primary; 0 means only the
	// caller's deadline. Without it a primary that hangs (a dead Redis
	// whose pool waits for connections) holds every call until Envoy's own
	// timeout, and Envoy, not the failure mode, decides.
	CallTimeout time.Duration
	// Replicas, when set, is how many replicas' fallbacks share each
	// limit while the primary fails (the live replicas last seen); each
	// fallback decision divides every limit by it (see share). nil, or a
	// value below 1, means 1: the fallback applies the whole limit.
	Replicas func() int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnError, when set, is told of every primary failure and the node it
	// came from ("" for a single-node primary); callers log it.
	OnError func(node string, err error)
	// OnChange, when set, is told when a node's circuit opens (with the
	// error that opened it) and when it closes again.
	OnChange func(node string, open bool, err error)
}

// Pinger is implemented by primaries that can check their backend; Ready
// uses it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Store wraps a primary ratelimit.Store with a failure mode. It owns both
// stores: Close closes them.
type Store struct {
	primary  ratelimit.Store
	fallback ratelimit.Store
	mode     Mode
	retry    time.Duration
	timeout  time.Duration
	now      func() time.Time
	br       *breaker.Set // one breaker per node
	onError  func(node string, err error)
	count    func() int // Options.Replicas; nil is 1
	m        metrics
	// nodes is a Router primary's Nodes, bound once: a method value made
	// per decision for breaker.Set.Prune would be an allocation each.
	nodes func(context.Context) ([]string, error)
}

var _ ratelimit.Store = (*Store)(nil)

// New wraps primary. It does not contact the primary: a Redis that is down
// at start-up does not fail construction (see Ready).
func New(primary ratelimit.Store, opts Options) (*Store, error) {
	opts, err := withDefaults(primary, opts)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer, opts.Mode)
	if err != nil {
		return nil, err
	}
	s := &Store{
		primary:  primary,
		fallback: opts.Fallback,
		mode:     opts.Mode,
		retry:    opts.DeniedRetryAfter,
		timeout:  opts.CallTimeout,
		now:      opts.Now,
		onError:  opts.OnError,
		count:    opts.Replicas,
		m:        m,
	}
	if err := s.m.registerReplicas(opts.Registerer, s.replicas); err != nil {
		return nil, err
	}
	s.br, err = breaker.NewSet(opts.FailureThreshold, opts.CoolDown, func(node string, open bool, err error) {
		s.m.circuitOpen.Set(float64(s.br.Open()))
		if opts.OnChange != nil {
			opts.OnChange(node, open, err)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	if s.onError == nil {
		s.onError = func(string, error) {}
	}
	if r, ok := primary.(Router); ok {
		s.nodes = r.Nodes
	}
	return s, nil
}

func withDefaults(primary ratelimit.Store, o Options) (Options, error) {
	var err error
	if o.Mode, err = ParseMode(string(o.Mode)); err != nil {
		return o, err
	}
	switch {
	case primary == nil:
		return o, fmt.Errorf("%w: nil primary store", ErrInvalidOptions)
	case o.Registerer == nil:
		return o, fmt.Errorf("%w: nil Registerer", ErrInvalidOptions)
	case o.Mode == Open && o.Fallback == nil:
		return o, fmt.Errorf("%w: Open mode needs a Fallback store", ErrInvalidOptions)
	case o.FailureThreshold < 0 || o.CoolDown < 0 || o.DeniedRetryAfter < 0 || o.CallTimeout < 0:
		return o, fmt.Errorf("%w: negative threshold or duration", ErrInvalidOptions)
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.CoolDown == 0 {
		o.CoolDown = DefaultCoolDown
	}
	if o.DeniedRetryAfter == 0 {
		o.DeniedRetryAfter = DefaultDeniedRetryAfter
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// Allow decides one limit for one key.
func (s *Store) Allow(ctx context.Context, key string, limit ratelimit.Limit, hits int64) (ratelimit.Result, error) {
	return ratelimit.AllowOne(ctx, s, key, limit, hits)
}

// AllowBatch asks the primary unless the circuit is open; on a backend
// failure it answers by the failure mode.
func (s *Store) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	d, _, err := s.AllowBatchSource(ctx, reqs)
	return d, err
}

// AllowBatchSource is AllowBatch that also reports whether the primary
// decided (false: the fallback did, or Closed mode denied, for at least one
// request). A cache of denials (package overlimit) must remember only the
// primary's: the fallback's per-replica state says nothing of what Redis
// would admit once it is back.
func (s *Store) AllowBatchSource(ctx context.Context, reqs []ratelimit.Request) (d []ratelimit.Decision, fromPrimary bool, err error) {
	node, groups := s.route(ctx, reqs) // route.go
	if groups == nil {
		return s.decideOn(ctx, node, reqs)
	}
	return s.decideGroups(ctx, reqs, groups)
}

// decideOn asks the primary for reqs, all decided by node, unless node's
// circuit is open; on a backend failure it answers by the failure mode.
func (s *Store) decideOn(ctx context.Context, node string, reqs []ratelimit.Request) ([]ratelimit.Decision, bool, error) {
	if !s.br.Get(node).Acquire(s.now()) {
		s.refresh() // the node may have been replaced meanwhile
		d, err := s.degraded(ctx, reqs, reasonCircuitOpen)
		return d, false, err
	}
	d, err := s.callPrimary(ctx, reqs)
	how := s.outcome(ctx, err)
	if s.br.Done(node, s.now(), err, how) {
		s.m.errors.Inc()
		s.onError(node, err)
		s.refresh()
	}
	s.prune()
	switch {
	case err == nil:
		return d, true, nil
	case how == breaker.Neutral:
		return nil, false, err
	}
	d, err = s.degraded(ctx, reqs, reasonError)
	return d, false, err
}

// callPrimary asks the primary within CallTimeout (when set). A caller
// whose own deadline comes first (Envoy's filter timeout, sent as
// grpc-timeout) already bounds the call; a timer of our own would change
// nothing and costs a context and a timer per decision.
func (s *Store) callPrimary(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	if d, ok := ctx.Deadline(); s.timeout <= 0 || (ok && time.Until(d) <= s.timeout) {
		return s.primary.AllowBatch(ctx, reqs)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.primary.AllowBatch(ctx, reqs)
}

// outcome says what a primary's error tells of the node that gave it.
func (s *Store) outcome(ctx context.Context, err error) breaker.Outcome {
	switch {
	case err != nil && isCallerError(ctx, err):
		return breaker.Neutral
	case s.clusterDown(err):
		return breaker.Unserved
	}
	return breaker.Fault
}

// isCallerError reports errors that say nothing about the primary's health:
// bad input, and a caller that cancelled.
func isCallerError(ctx context.Context, err error) bool {
	return errors.Is(err, ratelimit.ErrInvalidLimit) || errors.Is(err, ratelimit.ErrInvalidHits) ||
		errors.Is(err, ratelimit.ErrClosed) ||
		(errors.Is(err, context.Canceled) && ctx.Err() != nil)
}

// degraded answers without the primary: the fallback's decision (Open) or
// a denial of every request (Closed).
func (s *Store) degraded(ctx context.Context, reqs []ratelimit.Request, reason string) ([]ratelimit.Decision, error) {
	s.m.fallbacks.WithLabelValues(reason).Add(float64(len(reqs)))
	if s.mode == Open {
		// The caller's deadline may be what expired; the in-process
		// decision is instant and must still be made. Each replica's
		// fallback holds its share of every limit (share.go).
		return s.fallback.AllowBatch(context.WithoutCancel(ctx), shares(reqs, s.replicas()))
	}
	return s.denyAll(reqs)
}

func (s *Store) denyAll(reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	out := make([]ratelimit.Decision, len(reqs))
	for i, r := range reqs {
		if err := ratelimit.CheckCharge(r.Hits, r.Charge); err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		res := make([]ratelimit.Result, len(r.Limits))
		for j, l := range r.Limits {
			if err := l.Validate(); err != nil {
				return nil, fmt.Errorf("request %d limit %d: %w", i, j, err)
			}
			limit := l.Requests
			if l.Algorithm.OrDefault() == ratelimit.GCRA {
				limit = max(l.Requests, l.Burst)
			}
			res[j] = ratelimit.Result{Limit: limit, ResetAfter: s.retry, RetryAfter: s.retry}
		}
		out[i] = ratelimit.Decision{Results: res}
	}
	return out, nil
}

// Ready returns nil when the primary is usable, or an error saying why not.
// While a node's circuit cools down it reports that node's failures without
// calling the primary. Otherwise a Pinger primary is pinged, and a
// successful ping closes every circuit: without traffic there is no probe
// call, and readiness (hence the traffic) must not wait for one.
func (s *Store) Ready(ctx context.Context) error {
	if node, st, ok := s.br.Worst(s.now()); ok {
		return fmt.Errorf("redis circuit open%s after %d consecutive failures (%s mode): %w",
			nodeName(node), st.Failures, s.mode, st.LastErr)
	}
	p, ok := s.primary.(Pinger)
	if !ok {
		return nil
	}
	if err := p.Ping(ctx); err != nil {
		return fmt.Errorf("redis unreachable (%s mode): %w", s.mode, err)
	}
	s.br.Reset()
	return nil
}

func nodeName(node string) string {
	if node == "" {
		return ""
	}
	return " for node " + node
}

// Close closes the primary and the fallback; safe to call twice if they are.
func (s *Store) Close() error {
	err := s.primary.Close()
	if s.fallback != nil {
		err = errors.Join(err, s.fallback.Close())
	}
	return err
}
