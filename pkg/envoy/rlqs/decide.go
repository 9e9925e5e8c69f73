package rlqs

import (
	"context"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// reportWorkers bounds the buckets of one report (or tick) decided at once:
// enough that a slow store costs one store timeout per reportWorkers
// buckets rather than per bucket, few enough that one Envoy's report of a
// thousand buckets does not open a thousand store calls at once.
const reportWorkers = 16

// decideAll decides n buckets, up to reportWorkers at a time, and returns
// their actions in order (nil ones left out). ctx carries the deadline of
// the whole report: a bucket still undecided when it passes gets the
// failure mode's answer at once (its store calls fail fast on the ended
// context), so a report costs at most its deadline, however many buckets
// it has and however slow the store is.
func decideAll(ctx context.Context, n int, decide func(context.Context, int) *rlqspb.RateLimitQuotaResponse_BucketAction) []*rlqspb.RateLimitQuotaResponse_BucketAction {
	actions := make([]*rlqspb.RateLimitQuotaResponse_BucketAction, n)
	sem := make(chan struct{}, reportWorkers)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			actions[i] = decide(ctx, i)
		}()
	}
	wg.Wait()
	out := actions[:0]
	for _, a := range actions {
		if a != nil {
			out = append(out, a)
		}
	}
	return out
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
