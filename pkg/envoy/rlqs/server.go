package rlqs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/internal/randtoken"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/region"
)

// Options configure a Server. Policy and Allocator are required; the other
// fields have defaults.
type Options struct {
	// Policy returns the current policy snapshot (nil: no domains).
	Policy func() *policy.Policy
	// Allocator divides the budgets; its store decides whether replicas
	// share demands (quotaredis) or not (quota.MemoryStore).
	Allocator *quota.Allocator
	// Registerer takes the metrics; nil registers them nowhere.
	Registerer prometheus.Registerer
	// Logger receives the sampled warnings (unknown domain, store errors);
	// nil is silent.
	Logger *slog.Logger
	// FailClosed sends DENY_ALL when the demand store fails; false (fail
	// open) re-sends each bucket's last assignment instead.
	FailClosed bool
	// ReportInterval is how often Envoy reports; default
	// quota.ReportInterval (Envoy 1.40 reports every 5 s whatever its
	// reporting_interval says). Assignments are refreshed once per
	// interval and live for two intervals plus one second.
	ReportInterval time.Duration
	// Tick is how often a stream re-reads the allocation of its buckets and
	// pushes material changes; default one second.
	Tick time.Duration
	// StoreTimeout bounds each demand store call (a report and an
	// allocation); default 250ms. A call that times out is a store failure.
	StoreTimeout time.Duration
	// ReportTimeout bounds the store work of one report, and of one tick,
	// whatever its number of buckets: they are decided concurrently, and a
	// bucket still undecided when it passes gets the failure mode's answer
	// (as when the store fails). Default 1s, well under Envoy's 5 s report
	// interval.
	ReportTimeout time.Duration
	// MaxBuckets bounds the buckets one stream tracks; default 1000.
	// Buckets beyond it get no assignment (Envoy applies its
	// no_assignment_behavior) and are counted.
	MaxBuckets int
	// MaxBucketSeries bounds the bucket label values of the per-bucket
	// metrics; default 100, then "_overflow".
	MaxBucketSeries int
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Limits, when set, is the rate-limit store RLS and ext_authz decide on:
	// the requests Envoys report admitting are charged to the matched
	// rule's counter there, so that one limit is one budget across the
	// three APIs. Nil charges nothing.
	Limits ratelimit.Store
	// Regional, when set, is the region's share of global limits (the
	// region.Store Limits wraps, EXTAUTHZ_GLOBAL_REDIS_URL): a bucket whose
	// rule has a limit of scope global is divided from what the region may
	// give its Envoys of it (reserved in the region's Redis, and counted
	// there against the region's grant), not from the limit's rate, and its
	// Envoys' demand is reported to the exchanger with the region's own.
	// Their reported usage is then not charged to the global limit again.
	// Nil: a global limit is divided as a regional one.
	Regional Regional
	// TenantKey is EXTAUTHZ_RLS_TENANT_KEY: a bucket entry of this key is
	// the tenant, taken out before matching exactly as RLS takes it out of
	// a descriptor (so both count on one key). Empty disables.
	TenantKey string
	// TracerProvider, when set, gets one span per usage report, with the
	// store calls it makes as children when the stores are traced
	// (pkg/storetrace). Nil traces nothing.
	TracerProvider trace.TracerProvider
}

// Regional is what RLQS needs of the region's share of global limits;
// *region.Store implements it.
type Regional interface {
	// QuotaBudget is the rate (requests per second) the region's RLQS
	// Envoys may be assigned together, of the global limit l of key, for the
	// next ask.Horizon; it records their demand (region.Store.QuotaBudget).
	QuotaBudget(ctx context.Context, key string, l ratelimit.Limit, ask region.QuotaAsk) (float64, error)
}

var _ Regional = (*region.Store)(nil)

var errShortReply = errors.New("rlqs: rate-limit store returned no decision")

func (o *Options) defaults() error {
	switch {
	case o.Policy == nil:
		return errors.New("rlqs: nil Policy")
	case o.Allocator == nil:
		return errors.New("rlqs: nil Allocator")
	case o.ReportInterval < 0 || o.Tick < 0 || o.StoreTimeout < 0 || o.ReportTimeout < 0 || o.MaxBuckets < 0 || o.MaxBucketSeries < 0:
		return errors.New("rlqs: negative option")
	}
	if o.ReportInterval == 0 {
		o.ReportInterval = quota.ReportInterval
	}
	if o.Tick == 0 {
		o.Tick = time.Second
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = 250 * time.Millisecond
	}
	if o.ReportTimeout == 0 {
		o.ReportTimeout = defaultReportTimeout
	}
	if o.MaxBuckets == 0 {
		o.MaxBuckets = 1000
	}
	if o.MaxBucketSeries == 0 {
		o.MaxBucketSeries = 100
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// Server is the RateLimitQuotaService. Safe for concurrent use: each
// stream's state is its own.
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	opts     Options
	metrics  *metrics
	allocs   *allocCache
	ttl      time.Duration
	grantTTL time.Duration // as long as an assignment lives at the Envoy
	tracer   trace.Tracer
	domLog   envoy.SampledLog
	errLog   envoy.SampledLog

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain
}

// New returns a Server.
func New(o Options) (*Server, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer, o.MaxBucketSeries)
	if err != nil {
		return nil, err
	}
	// Envoy reads assignment_time_to_live in whole seconds.
	ttl := (2*o.ReportInterval + time.Second).Truncate(time.Second)
	s := &Server{opts: o, metrics: m, ttl: ttl, grantTTL: ttl, allocs: newAllocCache(o.Tick),
		draining: make(chan struct{}), tracer: tracerOf(o.TracerProvider)}
	m.storeErrors.WithLabelValues(failureMode(o.FailClosed))
	s.domLog.Log, s.errLog.Log = o.Logger, o.Logger
	return s, nil
}

// Register adds the service to a gRPC server.
func (s *Server) Register(r grpc.ServiceRegistrar) {
	rlqspb.RegisterRateLimitQuotaServiceServer(r, s)
}

// AssignmentTTL is the assignment_time_to_live of every assignment.
func (s *Server) AssignmentTTL() time.Duration { return s.ttl }

// Drain ends every stream, and each new one at once, with UNAVAILABLE: the
// replica is shutting down. Streams live as long as the Envoy, so without
// it a graceful stop would wait its whole timeout for them; an Envoy whose
// stream ends keeps its assignments and reconnects at its next report
// (every 5 s), to whichever replica its cluster picks. Safe to call twice.
func (s *Server) Drain() {
	s.drainOnce.Do(func() { close(s.draining) })
}

var errDraining = status.Error(codes.Unavailable, "rlqs: replica shutting down")

// StreamRateLimitQuotas serves one Envoy: its reports in, assignments out.
func (s *Server) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	select {
	case <-s.draining:
		return errDraining
	default:
	}
	first, err := stream.Recv()
	if err != nil {
		return endOfStream(err)
	}
	if first.GetDomain() == "" {
		s.metrics.rejected.WithLabelValues(reasonNoDomain).Inc()
		return status.Error(codes.InvalidArgument, "rlqs: the stream's first message must name a domain")
	}
	s.metrics.streams.Inc()
	st := newStream(s, stream, first.GetDomain(), newClientID())
	defer func() {
		st.close()
		s.metrics.streams.Dec()
	}()
	return st.run(first)
}

func failureMode(closed bool) string {
	if closed {
		return "closed"
	}
	return "open"
}

// endOfStream maps the client's closing of its side to a clean end.
func endOfStream(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// newClientID is a random ID for one stream: 96 bits, so two streams never
// share a demand entry.
func newClientID() string { return randtoken.Hex(12) }
