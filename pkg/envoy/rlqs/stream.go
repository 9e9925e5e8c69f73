package rlqs

import (
	"context"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/peer"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

// stream is the state of one Envoy's stream. Only its run goroutine touches
// it (a second goroutine only receives messages and hands them over).
type stream struct {
	s        *Server
	grpc     rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer
	ctx      context.Context
	domain   string
	clientID string
	peer     string             // the peer's host: whose orphaned grants this stream may take over
	buckets  map[string]*bucket // by canonical bucket ID
	overflow map[string]struct{}
}

func newStream(s *Server, g rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer, domain, clientID string) *stream {
	return &stream{
		s: s, grpc: g, ctx: g.Context(), domain: domain, clientID: clientID, peer: peerHost(g.Context()),
		buckets: map[string]*bucket{}, overflow: map[string]struct{}{},
	}
}

// run handles the first message, then every report and tick until the
// stream ends. Only Send errors (the stream is gone) and Drain end it with
// an error.
func (st *stream) run(first *rlqspb.RateLimitQuotaUsageReports) error {
	msgs := make(chan *rlqspb.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := st.grpc.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case msgs <- m:
			case <-st.ctx.Done():
				return
			}
		}
	}()
	if err := st.report(first); err != nil {
		return err
	}
	tick := time.NewTicker(st.s.opts.Tick)
	defer tick.Stop()
	for {
		var err error
		select {
		case m := <-msgs:
			err = st.report(m)
		case <-tick.C:
			err = st.refresh()
		case err := <-recvErr:
			return endOfStream(err)
		case <-st.ctx.Done():
			return nil
		case <-st.s.draining:
			return errDraining
		}
		if err != nil {
			return err
		}
	}
}

// report takes one usage report: each bucket's demand is recorded and its
// assignment re-read; the changed ones go out in one message. The buckets
// are decided concurrently under one deadline (decideAll).
func (st *stream) report(m *rlqspb.RateLimitQuotaUsageReports) error {
	now := st.s.opts.Now()
	st.s.metrics.reports.Inc()
	ctx, span := st.s.startReport(st.ctx, st.domain, len(m.GetBucketQuotaUsages()))
	var out []*rlqspb.RateLimitQuotaResponse_BucketAction
	defer func() { endReport(span, len(out)) }()
	buckets, usages := st.usages(m)
	ctx, cancel := st.reportContext(ctx)
	defer cancel()
	ds := decideAll(ctx, len(buckets), func(ctx context.Context, i int) decision {
		b := buckets[i]
		for _, u := range usages[i] {
			st.s.metrics.usage(b.series, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())
			b.demand = b.meter.Observe(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), now)
			st.charge(ctx, b, u.GetNumRequestsAllowed())
			b.reported = true
		}
		return st.assign(ctx, b, now, st.refreshOnReport())
	})
	out = actions(ds)
	return st.sendAndRecord(out, ds, now)
}

// refresh re-reads every bucket's assignment (other clients' reports move
// it) and re-sends those that changed or are due for a refresh, under the
// same deadline as a report.
func (st *stream) refresh() error {
	now := st.s.opts.Now()
	keys := slices.Sorted(maps.Keys(st.buckets))
	ctx, cancel := st.reportContext(st.ctx)
	defer cancel()
	ds := decideAll(ctx, len(keys), func(ctx context.Context, i int) decision {
		return st.assign(ctx, st.buckets[keys[i]], now, st.refreshOnTick())
	})
	return st.sendAndRecord(actions(ds), ds, now)
}

// sendAndRecord sends the actions, then records the grants that wait for
// the send (recordSent): a share that shrinks is recorded only once it is
// on its way, so that no other client grows into room this one still
// holds.
func (st *stream) sendAndRecord(out []*rlqspb.RateLimitQuotaResponse_BucketAction, ds []decision, now time.Time) error {
	if err := st.send(out); err != nil {
		return err
	}
	st.recordSent(ds, now)
	return nil
}

func (st *stream) send(actions []*rlqspb.RateLimitQuotaResponse_BucketAction) error {
	if len(actions) == 0 {
		return nil
	}
	st.s.metrics.responses.Inc()
	return st.grpc.Send(&rlqspb.RateLimitQuotaResponse{BucketAction: actions})
}

// bucket returns the state of a bucket ID, creating it (and matching it
// against the policy) at its first report; nil for an empty ID or past
// MaxBuckets, both counted.
func (st *stream) bucket(id map[string]string) *bucket {
	if len(id) == 0 {
		st.s.metrics.buckets.WithLabelValues(outcomeEmptyID).Inc()
		return nil
	}
	key := canonical(id)
	if b := st.buckets[key]; b != nil {
		return b
	}
	if len(st.buckets) >= st.s.opts.MaxBuckets {
		if _, seen := st.overflow[key]; !seen && len(st.overflow) < st.s.opts.MaxBuckets {
			st.overflow[key] = struct{}{}
			st.s.metrics.buckets.WithLabelValues(outcomeOverflow).Inc()
		}
		return nil
	}
	b := &bucket{id: maps.Clone(id)}
	st.resolve(b)
	st.s.metrics.buckets.WithLabelValues(b.outcome).Inc()
	st.buckets[key] = b
	return b
}

// close gives back this stream's part of the assigned-rate gauges and
// leaves its grants as orphans to its peer: the Envoy behind the stream
// still enforces them until they expire, unless it reconnects, and then its
// new stream takes them over (quota.GrantStore.OrphanGrant) instead of
// waiting for them to expire while its old assignments run out.
func (st *stream) close() {
	var granted []*bucket
	for _, b := range st.buckets {
		st.s.metrics.assigned(b.series, -b.assignedRate)
		if b.sent && b.lastKind == kindShared {
			granted = append(granted, b)
		}
	}
	if st.peer == "" || len(granted) == 0 {
		return
	}
	// The stream's context has ended: the marking gets a deadline of its own.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(st.ctx), st.s.opts.ReportTimeout)
	defer cancel()
	now := st.s.opts.Now()
	forEach(len(granted), func(i int) {
		sctx, cancel := st.storeContext(ctx)
		defer cancel()
		g := quota.Grant{Bucket: granted[i].storeKey, Client: st.clientID, Peer: st.peer}
		if err := st.s.opts.Allocator.OrphanGrant(sctx, g, now); err != nil {
			st.storeFailed(err)
		}
	})
}

// peerHost is the host of the stream's peer address (the Envoy's IP: its
// port changes with every connection), or "" when unknown.
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	addr := p.Addr.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// canonical is a bucket ID as one string: entries in key order, escaped as
// in rate-limit keys, so that two maps with the same entries are one bucket.
func canonical(id map[string]string) string {
	entries := make([]ratelimit.Entry, 0, len(id))
	for _, k := range slices.Sorted(maps.Keys(id)) {
		entries = append(entries, ratelimit.Entry{Key: k, Value: id[k]})
	}
	return ratelimit.Key("", "", entries)
}

// demandTotal sums the measured demands of an allocation (Unknown ones are
// left out: they are not a rate).
func demandTotal(shares map[string]quota.Share) float64 {
	var sum float64
	for _, s := range shares {
		if s.Demand != quota.Unknown {
			sum += s.Demand
		}
	}
	return sum
}

// labelValue is a bucket series label: printable, bounded.
func labelValue(s string) string {
	if len(s) > 128 {
		s = s[:128]
	}
	return strings.ToValidUTF8(s, "?")
}
