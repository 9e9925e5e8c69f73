package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// serveMain reads the configuration and serves until ctx ends; notes are
// more warnings to log with the configuration's.
func serveMain(ctx context.Context, stderr io.Writer, notes ...string) int {
	cfg, warnings, err := loadConfig()
	warnings = append(warnings, notes...)
	if err != nil {
		printConfigErrors(stderr, err)
		return 2
	}
	level, _ := cfg.slogLevel() // validated
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	for _, w := range warnings {
		log.Warn("envoyproxy/ratelimit setting: " + w)
	}
	tuneGC(log)
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("exiting", "err", err)
		return 1
	}
	log.Info("stopped")
	return 0
}

// server is the running process: one gRPC server for every Envoy-facing
// service, one HTTP server for metrics and probes.
type server struct {
	log    *slog.Logger
	grpc   *grpc.Server
	health *healthServer
	http   *http.Server
	policy *policySource
	replay *http.Server // nil without object storage
	store  ratelimit.Store
	warm   *warmUp // nil without a warm-up (warm.go)
	// grpcLn is the gRPC listener, which tells shutdown when GracefulStop
	// has closed it (drain.go).
	grpcLn   *notifyListener
	draining atomic.Bool
	// drainDelay is how long the server keeps serving after SIGTERM with
	// its health NOT_SERVING; timeout bounds the in-flight calls after it.
	drainDelay time.Duration
	timeout    time.Duration
	// tls serves the gRPC port with TLS (nil: plaintext); uds is the path
	// of a Unix socket also serving gRPC ("": none). listen.go.
	tls *grpcTLS
	uds string
}

// serve builds the server from cfg and runs it until ctx ends.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	log.Info("starting", "version", version)
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	src, err := newPolicySource(cfg, reg, log) // policysrc.go
	if err != nil {
		return err
	}
	store, err := newStore(ctx, cfg, storeDeps{Registerer: reg, Logger: log})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s := &server{log: log, policy: src, store: store, drainDelay: cfg.DrainDelay, timeout: cfg.ShutdownTimeout, uds: cfg.GRPCUDS}
	defer s.closeStore()
	if s.tls, err = newGRPCTLS(cfg, reg); err != nil {
		return err
	}
	metrics, err := envoy.NewMetricsWith(reg, cfg.metricsOptions())
	if err != nil {
		return err
	}
	idem, err := newIdempotency(cfg, store, reg, log)
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	rp, err := newReplay(ctx, cfg, idem, reg, log)
	if err != nil {
		return err
	}
	defer rp.close(log)
	tr, err := newTracer(ctx, cfg, src, log)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer tr.shutdown() // after run: the last calls' spans are queued by then
	services, err := newServices(cfg, tr.rateLimit(cfg, store), src, metrics, tr.idempotency(cfg, idem), log, rp.options...)
	services, err = withRLQS(ctx, services, err, cfg, store, tr, src.Current, reg, log) // rlqs.go
	if err != nil {
		return err
	}
	s.replay = rp.server
	s.grpc, s.health = newGRPCServer(services, grpcServerOptions(cfg, tr)...)
	s.gateReadiness(ctx, cfg) // policysrc.go, warm.go
	s.http = newHTTPServer(s, reg)
	stopOperator, err := startSideListeners(cfg, adminDeps{limits: store, idem: idem, policies: src, reg: reg, log: log}, reg)
	if err != nil {
		return err
	}
	defer stopOperator()
	return s.run(ctx, cfg.GRPCAddr, cfg.HTTPAddr)
}

// grpcService is an Envoy-facing server of pkg/envoy.
type grpcService interface {
	Register(r grpc.ServiceRegistrar)
}

// serviceList collects services, keeping the first constructor error, so
// that adding one is a single line in newServices.
type serviceList struct {
	services []grpcService
	err      error
}

func (l *serviceList) add(s grpcService, err error) {
	if l.err == nil && err != nil {
		l.err = err
	}
	if err == nil {
		l.services = append(l.services, s)
	}
}

// newServices builds every gRPC service served. Add a server here with one
// line, as l.add(rls.NewRLS(...)) below.
func newServices(cfg Config, store ratelimit.Store, policies envoy.PolicySource, m *envoy.Metrics, idem idempotencyDeps, log *slog.Logger, extra ...authz.IdempotencyOption) ([]grpcService, error) {
	var l serviceList
	l.add(rls.NewRLS(store, policies, m, rlsOptions(cfg, log)...))
	timeout := authz.WithStoreTimeout(cfg.IdempotencyStoreTimeout)
	// One latency record for both: ext_proc measures the leases, ext_authz
	// answers most 409s.
	latency := authz.WithRouteLatency(authz.NewRouteLatency(nil))
	charges := authz.WithCharges(store, idem.charges.lockouts, idem.charges.metrics)
	keys := authz.WithChargeKeySecret(idem.charges.keySecret, log)
	opts := append([]authz.IdempotencyOption{timeout, latency, authz.WithInFlight(idem.inFlight), charges, keys}, extra...)
	l.add(authz.NewAuthz(store, idem.store, policies, m, idem.events, opts...))
	l.add(authz.NewExtProc(idem.store, policies, m, idem.events, opts...))
	return l.services, l.err
}

// rlsOptions are the RLS server's options, shared with the admin API's.
func rlsOptions(cfg Config, log *slog.Logger) []rls.Option {
	return []rls.Option{rls.WithTenantKey(cfg.RLSTenantKey), rls.WithRLSLogger(log),
		rls.WithGlobalShadowMode(cfg.ShadowMode), rls.WithGlobalQuotaMode(cfg.QuotaMode),
		rls.WithResponseMetadata(cfg.ResponseDynamicMetadata),
		rls.WithCharging(cfg.rlsCharging()), rls.WithDefaultAlgorithm(cfg.descriptorAlgorithm())}
}

// grpcServerOptions are the gRPC server's settings: tracing, message limits
// and stream workers.
func grpcServerOptions(cfg Config, tr tracer) []grpc.ServerOption {
	recv, send := cfg.grpcMessageLimits()
	opts := append(tr.serverOptions(), grpc.MaxRecvMsgSize(recv), grpc.MaxSendMsgSize(send))
	if cfg.GRPCStreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(uint32(cfg.GRPCStreamWorkers)))
	}
	return opts
}

// newGRPCServer registers services, grpc.health.v1 (each service and the
// whole server, "", SERVING) and reflection on one server. Every service
// decodes with envoy.Codec: Envoy passes raw header bytes in proto3 string
// fields, and grpc-go's default codec would fail those calls before any
// handler ran (an error Envoy's filters usually turn into "admit").
func newGRPCServer(services []grpcService, opts ...grpc.ServerOption) (*grpc.Server, *healthServer) {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(envoy.NewCodec())}, opts...)...)
	for _, svc := range services {
		svc.Register(g)
	}
	hs := newHealthServer()
	healthpb.RegisterHealthServer(g, hs)
	reflection.Register(g)
	for name := range g.GetServiceInfo() {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	return g, hs
}

// run listens, serves until ctx ends or a server fails, then shuts down.
func (s *server) run(ctx context.Context, grpcAddr, httpAddr string) error {
	grpcLn, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("EXTAUTHZ_GRPC_ADDR=%q: %w", grpcAddr, err)
	}
	httpLn, err := net.Listen("tcp", httpAddr)
	if err != nil {
		grpcLn.Close()
		return fmt.Errorf("EXTAUTHZ_HTTP_ADDR=%q: %w", httpAddr, err)
	}
	s.grpcLn = newNotifyListener(grpcLn)
	s.log.Info("grpc listening", "addr", grpcLn.Addr().String(), "tls", s.tls != nil)
	s.log.Info("http listening", "addr", httpLn.Addr().String())

	var wg sync.WaitGroup
	errc := make(chan error, 4)
	wg.Go(func() { errc <- s.grpc.Serve(s.tls.wrap(s.grpcLn)) })
	s.serveUnix(&wg, errc)
	wg.Go(func() { errc <- ignoreClosed(s.http.Serve(httpLn)) })
	if s.replay != nil {
		replayLn, err := net.Listen("tcp", s.replay.Addr)
		if err != nil {
			errc <- fmt.Errorf("EXTAUTHZ_REPLAY_ADDR=%q: %w", s.replay.Addr, err)
		} else {
			s.log.Info("replay listening", "addr", replayLn.Addr().String())
			wg.Go(func() { errc <- ignoreClosed(s.replay.Serve(replayLn)) })
		}
	}
	watchCtx, stopWatch := context.WithCancel(context.Background())
	if s.policy.run != nil {
		wg.Go(func() { s.watch(watchCtx) })
	}
	wg.Go(func() { s.tls.watch(watchCtx, s.log) })

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "reason", context.Cause(ctx))
	case runErr = <-errc:
		s.log.Error("server failed", "err", runErr)
	}
	s.shutdown(runErr != nil)
	stopWatch()
	wg.Wait()
	return runErr
}

// serveUnix serves gRPC on the Unix socket too, when one is configured;
// GracefulStop closes it with the TCP listener.
func (s *server) serveUnix(wg *sync.WaitGroup, errc chan<- error) {
	if s.uds == "" {
		return
	}
	ln, err := listenUnix(s.uds)
	if err != nil {
		errc <- fmt.Errorf("EXTAUTHZ_GRPC_UDS=%q: %w", s.uds, err)
		return
	}
	s.log.Info("grpc unix socket listening", "path", s.uds)
	wg.Go(func() { errc <- s.grpc.Serve(ln) })
}

// watch reloads the policy on changes; if watching itself fails the last
// policy stays in force (and is logged), rather than taking down a serving
// process.
func (s *server) watch(ctx context.Context) {
	err := s.policy.run(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Error("policy watch stopped; changes will not be reloaded", "err", err)
	}
}

func (s *server) closeStore() {
	if err := s.store.Close(); err != nil {
		s.log.Error("closing store", "err", err)
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
