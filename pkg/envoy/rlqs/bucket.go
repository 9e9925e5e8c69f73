package rlqs

import (
	"context"
	"math"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/region"
)

// kind is what a bucket is assigned.
type kind int

const (
	kindShared kind = iota // a share of the rule's budget (a token bucket, or DENY_ALL for none)
	kindAllow              // ALLOW_ALL
	kindDeny               // DENY_ALL
)

// bucket is one bucket ID of one stream.
type bucket struct {
	id map[string]string

	// From the policy snapshot pol (re-matched when the snapshot changes).
	pol      *policy.Policy
	kind     kind
	outcome  string            // the extauthz_rlqs_buckets_total outcome
	series   string            // the bucket label of the per-bucket metrics
	storeKey string            // kindShared: the demand store's bucket key
	budget   float64           // kindShared: requests per second (the regional limits' with globals)
	limits   []ratelimit.Limit // kindShared: the limits charged with the reported usage
	globals  []ratelimit.Limit // kindShared: the global limits divided from the region's share (Options.Regional)
	current  float64           // kindShared: the budget of the last allocation read

	meter    quota.Meter
	demand   float64
	reported bool // a demand not yet written to the store

	// The last assignment sent.
	sent         bool
	sentAt       time.Time
	lastKind     kind
	last         quota.TokenBucket // lastKind == kindShared
	lastStrategy *typev3.RateLimitStrategy
	assignedRate float64 // its token rate, in the assigned gauge
}

// resolve matches b against the current policy.
func (st *stream) resolve(b *bucket) {
	p := st.s.opts.Policy()
	b.pol = p
	b.storeKey, b.budget, b.limits, b.globals = "", 0, nil, nil
	d := p.Domain(st.domain)
	if d == nil {
		b.kind, b.outcome, b.series = kindAllow, outcomeUnknownDomain, seriesUnknownDomain
		st.s.domLog.Print("rlqs: a stream's domain is not in the policy; its buckets are allowed",
			"domain", labelValue(st.domain))
		return
	}
	id, tenant := splitTenant(b.id, st.s.opts.TenantKey, d)
	m, ok := d.MatchBucket(id)
	if !ok {
		b.kind, b.outcome, b.series = kindAllow, outcomeNoMatch, seriesNoMatch
		return
	}
	b.series = st.s.metrics.series.name(m.MetricID)
	switch r := m.Rule; {
	case r.Blocked:
		b.kind, b.outcome = kindDeny, outcomeBlocked
	case r.Unlimited || len(r.Limits) == 0:
		b.kind, b.outcome = kindAllow, outcomeUnlimited
	case r.ShadowMode:
		b.kind, b.outcome = kindAllow, outcomeShadow
	default:
		b.kind, b.outcome = kindShared, outcomeLimited
		// The key RLS counts the same descriptor under: the demand store
		// and the shared counter use it, each under its own prefix.
		b.storeKey = ratelimit.Key(tenant, d.Name, m.KeyEntries)
		b.limits, b.globals = st.splitGlobals(r.Limits)
		b.budget = budgetOf(b.limits)
	}
}

// splitGlobals separates the global limits, divided from the region's
// share, from the others, when the server has the region's share.
func (st *stream) splitGlobals(limits []ratelimit.Limit) (others, globals []ratelimit.Limit) {
	if st.s.opts.Regional == nil {
		return limits, nil
	}
	for _, l := range limits {
		if l.Scope == ratelimit.Global {
			globals = append(globals, l)
		} else {
			others = append(others, l)
		}
	}
	return others, globals
}

// refreshOnReport is the age from which a report refreshes an assignment:
// half an interval, so that every report does (Envoy reports once per
// interval, give or take a few milliseconds) and the assignment an Envoy
// holds is never much older than one interval. Its stream may end at any
// moment and Envoy re-opens it only at its next report, up to an interval
// later: the old assignment must outlive that and the new stream's first
// answer (assignment_time_to_live is two intervals and a second). With a
// full interval, a report that came a millisecond early left the refresh
// to the next tick, a second older, and used up that second.
func (st *stream) refreshOnReport() time.Duration { return st.s.opts.ReportInterval / 2 }

// refreshOnTick is the age from which a tick refreshes an assignment: an
// interval less half a tick (at least half an interval), so that one sent
// by a tick between two reports is refreshed by the tick an interval later
// whatever the ticks' jitter, never a tick after that; and a stream whose
// reports stopped still has its assignments refreshed before they expire,
// without a second message per interval while the reports come.
func (st *stream) refreshOnTick() time.Duration {
	o := st.s.opts
	return max(o.ReportInterval-o.Tick/2, o.ReportInterval/2)
}

// budgetOf is the tightest of a rule's limits as a rate: RLQS enforces
// rates, so a limit per day becomes its average rate.
func budgetOf(limits []ratelimit.Limit) float64 {
	budget := math.Inf(1)
	for _, l := range limits {
		budget = min(budget, quota.RateOf(l.Requests, l.Period))
	}
	return budget
}

// assign decides what to send for b now (nothing when the last one still
// holds): the policy's answer for blanket buckets, else the client's share,
// sent when it changed materially or is due for a refresh: when the last
// one is refreshAge old (refreshOnReport, refreshOnTick).
func (st *stream) assign(ctx context.Context, b *bucket, now time.Time, refreshAge time.Duration) decision {
	if st.s.opts.Policy() != b.pol {
		st.rematch(b)
	}
	due := !b.sent || now.Sub(b.sentAt) >= refreshAge
	if b.kind != kindShared {
		if !due && b.lastKind == b.kind {
			return decision{}
		}
		return decision{action: st.blanket(b, b.kind, now)}
	}
	share, ok, err := st.share(ctx, b, now)
	if err != nil {
		return decision{action: st.failed(b, now, due, err)}
	}
	if !ok { // the client has no live demand for this bucket: let the last one run out
		return decision{}
	}
	if !due && b.lastKind == kindShared && !quota.Material(b.last, share) {
		return decision{}
	}
	return st.grant(ctx, b, share, now, due)
}

// grant sends b's share so that what the clients of the bucket were sent
// never sums above the budget: the allocation is computed from demands,
// but each client enforces what it was last sent, and a client whose share
// shrank learns of it only at its next tick (an Envoy that reconnected
// under a new client ID still holds its old stream's share). So a share
// that does not grow is sent first and recorded after (decision.after); one
// that grows is recorded first, capped to what the other clients' live
// grants leave, and the capped share is sent.
func (st *stream) grant(ctx context.Context, b *bucket, want quota.TokenBucket, now time.Time, due bool) decision {
	g := quota.Grant{Bucket: b.storeKey, Client: st.clientID, TTL: st.s.grantTTL}
	if b.sent && b.lastKind == kindShared && want.Rate() <= b.last.Rate() {
		g.Rate = want.Rate()
		return decision{action: st.tokenBucket(b, want, now), after: &g}
	}
	if !b.sent {
		// A first assignment may take over its peer's orphaned grant: the
		// Envoy it came from may be this one, reconnected.
		g.Peer = st.peer
	}
	sctx, cancel := st.storeContext(ctx)
	defer cancel()
	if err := sctx.Err(); err != nil { // the report's deadline has passed
		return decision{action: st.failed(b, now, due, err)}
	}
	tb, err := st.s.opts.Allocator.GrowGrant(sctx, g, want, b.current, now)
	if err != nil {
		return decision{action: st.failed(b, now, due, err)}
	}
	if !b.sent && tb.DenyAll && !want.DenyAll {
		// No room yet for a first assignment: send nothing, and try again
		// at the next tick, once the others' shares have shrunk. An Envoy
		// that reconnected (and found no orphan of its peer to take over)
		// keeps enforcing what its old stream was sent, counted under the
		// old client ID until it expires; a new one applies its
		// no_assignment_behavior meanwhile.
		return decision{}
	}
	if !due && b.sent && b.lastKind == kindShared && !quota.Material(b.last, tb) {
		return decision{}
	}
	return decision{action: st.tokenBucket(b, tb, now)}
}

// rematch re-matches b after a policy reload, moving its assigned rate to
// its new series.
func (st *stream) rematch(b *bucket) {
	old := b.series
	st.resolve(b)
	if b.series != old {
		st.s.metrics.assigned(old, -b.assignedRate)
		st.s.metrics.assigned(b.series, b.assignedRate)
	}
}

// share records b's pending demand and reads the client's share of the
// allocation; ok is false when the allocation has no entry for the client.
func (st *stream) share(ctx context.Context, b *bucket, now time.Time) (quota.TokenBucket, bool, error) {
	shares, current, ok := st.s.allocs.get(b.storeKey, b.budget, now)
	b.current = current
	if b.reported || !ok {
		var err error
		if shares, err = st.allocate(ctx, b, now); err != nil {
			return quota.TokenBucket{}, false, err
		}
	}
	s, ok := shares[st.clientID]
	return s.Bucket, ok, nil
}

// allocate writes b's pending demand and reads the bucket's allocation from
// the store, caching it for the replica's other streams.
func (st *stream) allocate(ctx context.Context, b *bucket, now time.Time) (map[string]quota.Share, error) {
	alloc := st.s.opts.Allocator
	ctx, cancel := st.storeContext(ctx)
	defer cancel()
	if err := ctx.Err(); err != nil { // the report's deadline has passed
		return nil, err
	}
	if b.reported {
		if err := alloc.Report(ctx, b.storeKey, st.clientID, b.demand, now); err != nil {
			return nil, err
		}
		b.reported = false
	}
	demands, err := alloc.Demands(ctx, b.storeKey, now)
	if err != nil {
		return nil, err
	}
	current, err := st.budgetNow(ctx, b, demands)
	if err != nil {
		return nil, err
	}
	shares := alloc.Divide(current, demands)
	b.current = current
	st.s.allocs.put(b.storeKey, b.budget, current, shares, now)
	st.s.metrics.demand.WithLabelValues(b.series).Set(demandTotal(shares))
	return shares, nil
}

// budgetNow is what b's clients divide now: the rule's budget, or less for
// a rule with global limits: what the region may give its Envoys of each
// (Regional.QuotaBudget, which reserves it in the region's Redis and
// records the Envoys' demand). An assignment is made from an allocation up
// to a tick old and replaced (or found no larger) by the stream's next
// tick, so it is sized for three ticks: a message may be a tick late.
func (st *stream) budgetNow(ctx context.Context, b *bucket, demands map[string]float64) (float64, error) {
	budget := b.budget
	if len(b.globals) == 0 {
		return budget, nil
	}
	var demand float64
	for _, d := range demands {
		demand += d // Unknown is +Inf: ask for the whole limit
	}
	ask := region.QuotaAsk{Demand: demand, Burst: st.s.opts.Allocator.Burst(), Horizon: 3 * st.s.opts.Tick}
	for _, l := range b.globals {
		r, err := st.s.opts.Regional.QuotaBudget(ctx, b.storeKey, l, ask)
		if err != nil {
			return 0, err
		}
		budget = min(budget, r)
	}
	return budget, nil
}

// failed applies the failure mode when the demand store failed for b.
func (st *stream) failed(b *bucket, now time.Time, due bool, err error) *rlqspb.RateLimitQuotaResponse_BucketAction {
	st.storeFailed(err)
	switch {
	case st.s.opts.FailClosed:
		if !due && b.lastKind == kindDeny {
			return nil
		}
		return st.blanket(b, kindDeny, now)
	case !due:
		return nil // the last assignment is still live
	case b.sent:
		return st.record(b, b.lastKind, b.last, b.lastStrategy, now, kindLabel(b.lastKind, b.last))
	}
	return st.blanket(b, kindAllow, now)
}

// storeFailed counts and logs (sampled) a failed demand store call.
func (st *stream) storeFailed(err error) {
	mode := failureMode(st.s.opts.FailClosed)
	st.s.metrics.storeErrors.WithLabelValues(mode).Inc()
	st.s.errLog.Print("rlqs: demand store failed; applying the failure mode", "mode", mode, "err", err)
}

func (st *stream) blanket(b *bucket, k kind, now time.Time) *rlqspb.RateLimitQuotaResponse_BucketAction {
	rule, label := typev3.RateLimitStrategy_ALLOW_ALL, labelAllowAll
	if k == kindDeny {
		rule, label = typev3.RateLimitStrategy_DENY_ALL, labelDenyAll
	}
	strategy := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
	return st.record(b, k, quota.TokenBucket{}, strategy, now, label)
}

func (st *stream) tokenBucket(b *bucket, tb quota.TokenBucket, now time.Time) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return st.record(b, kindShared, tb, strategyOf(tb), now, kindLabel(kindShared, tb))
}

// strategyOf is a share as Envoy's strategy: a token bucket, or DENY_ALL for
// a share too small to express.
func strategyOf(tb quota.TokenBucket) *typev3.RateLimitStrategy {
	if tb.DenyAll {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     tb.MaxTokens,
		TokensPerFill: wrapperspb.UInt32(tb.TokensPerFill),
		FillInterval:  durationpb.New(tb.FillInterval),
	}}}
}

func kindLabel(k kind, tb quota.TokenBucket) string {
	switch {
	case k == kindAllow:
		return labelAllowAll
	case k == kindDeny || tb.DenyAll:
		return labelDenyAll
	}
	return labelTokenBucket
}

// record remembers what b is sent and returns the action.
func (st *stream) record(b *bucket, k kind, tb quota.TokenBucket, strategy *typev3.RateLimitStrategy, now time.Time, label string) *rlqspb.RateLimitQuotaResponse_BucketAction {
	b.sent, b.sentAt, b.lastKind, b.last, b.lastStrategy = true, now, k, tb, strategy
	rate := 0.0
	if k == kindShared {
		rate = tb.Rate()
	}
	st.s.metrics.assigned(b.series, rate-b.assignedRate)
	b.assignedRate = rate
	st.s.metrics.assignments.WithLabelValues(label).Inc()
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: &rlqspb.BucketId{Bucket: b.id},
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(st.s.ttl),
				RateLimitStrategy:    strategy,
			},
		},
	}
}
