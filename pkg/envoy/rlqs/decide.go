package rlqs

import (
	"context"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// reportWorkers bounds the buckets of one report (or tick) decided at once:
// enough that a slow store costs one store timeout per reportWorkers
// buckets rather than per bucket, few enough that one Envoy's report of a
// thousand buckets does not open a thousand store calls at once.
const reportWorkers = 16

// decision is what one bucket's report or tick produced: an action to send
// (or nil), and a grant to record once it has been sent (a share that does
// not grow; see stream.grant).
type decision struct {
	action *rlqspb.RateLimitQuotaResponse_BucketAction
	after  *quota.Grant
}

// decideAll decides n buckets, up to reportWorkers at a time, in order.
// ctx carries the deadline of the whole report: a bucket still undecided
// when it passes gets the failure mode's answer at once (its store calls
// fail fast on the ended context), so a report costs at most its deadline,
// however many buckets it has and however slow the store is.
func decideAll(ctx context.Context, n int, decide func(context.Context, int) decision) []decision {
	out := make([]decision, n)
	forEach(n, func(i int) { out[i] = decide(ctx, i) })
	return out
}

// forEach runs f for 0..n-1, up to reportWorkers at a time.
func forEach(n int, f func(int)) {
	sem := make(chan struct{}, reportWorkers)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// actions are the decisions' actions to send, in order.
func actions(ds []decision) []*rlqspb.RateLimitQuotaResponse_BucketAction {
	var out []*rlqspb.RateLimitQuotaResponse_BucketAction
	for _, d := range ds {
		if d.action != nil {
			out = append(out, d.action)
		}
	}
	return out
}

// recordSent records the grants of shares just sent that did not grow,
// under a deadline of their own: the report's may be spent, the stream may
// end meanwhile (what was sent is enforced all the same), and a grant not
// recorded lets the client's previous one lapse while it still enforces
// the re-sent one. A failure counts as a store error; the previous grant,
// no smaller, stays until its TTL.
func (st *stream) recordSent(ds []decision, now time.Time) {
	ctx, cancel := st.reportContext(context.WithoutCancel(st.ctx))
	defer cancel()
	forEach(len(ds), func(i int) {
		g := ds[i].after
		if g == nil {
			return
		}
		sctx, cancel := st.storeContext(ctx)
		defer cancel()
		if err := st.s.opts.Allocator.SetGrant(sctx, *g, now); err != nil {
			st.storeFailed(err)
		}
	})
}

// storeContext bounds one bucket's store calls by StoreTimeout within the
// report's deadline; once the deadline has passed it fails at once.
func (st *stream) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, st.s.opts.StoreTimeout)
}

// reportContext is the deadline of one report or tick.
func (st *stream) reportContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, st.s.opts.ReportTimeout)
}

// usages groups a report's usages by bucket, in the order of each bucket's
// first usage: the buckets of one report are decided concurrently, and a
// bucket reported twice in one message must still be observed in order by
// one goroutine.
func (st *stream) usages(m *rlqspb.RateLimitQuotaUsageReports) ([]*bucket, [][]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) {
	var order []*bucket
	byBucket := map[*bucket][]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{}
	for _, u := range m.GetBucketQuotaUsages() {
		b := st.bucket(u.GetBucketId().GetBucket())
		if b == nil {
			continue
		}
		if _, seen := byBucket[b]; !seen {
			order = append(order, b)
		}
		byBucket[b] = append(byBucket[b], u)
	}
	us := make([][]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, len(order))
	for i, b := range order {
		us[i] = byBucket[b]
	}
	return order, us
}

// defaultReportTimeout bounds a report's (and a tick's) store work: well
// under Envoy's 5 s report interval and the 1 s tick, and several store
// timeouts long, so that a healthy store never meets it.
const defaultReportTimeout = time.Second
