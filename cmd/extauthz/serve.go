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
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// serveMain reads the configuration and serves until ctx ends.
func serveMain(ctx context.Context, stderr io.Writer) int {
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "extauthz: %v\n", err)
		return 1
	}
	level, _ := cfg.slogLevel() // validated
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
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
	log      *slog.Logger
	grpc     *grpc.Server
	health   *health.Server
	http     *http.Server
	policy   *policySource
	store    ratelimit.Store
	draining atomic.Bool
	timeout  time.Duration
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
	src, err := newPolicySource(cfg.Config, reg, log)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	store, err := newStore(ctx, cfg, storeDeps{Registerer: reg, Logger: log})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s := &server{log: log, policy: src, store: store, timeout: cfg.ShutdownTimeout}
	defer s.closeStore()
	metrics, err := envoy.NewMetrics(reg)
	if err != nil {
		return err
	}
	idem, err := newIdempotency(cfg, store, reg, log)
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	services, err := newServices(cfg, store, src, metrics, idem)
	if err != nil {
		return err
	}
	s.grpc, s.health = newGRPCServer(services)
	s.http = newHTTPServer(s, reg)
	if cfg.DebugAddr != "" {
		stopDebug, err := startDebug(cfg.DebugAddr, log)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
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
// line: l.add(envoy.NewXxx(...)).
func newServices(cfg Config, store ratelimit.Store, policies envoy.PolicySource, m *envoy.Metrics, idem idempotencyDeps) ([]grpcService, error) {
	var l serviceList
	l.add(envoy.NewRLS(store, policies, m, envoy.WithTenantKey(cfg.RLSTenantKey)))
	timeout := envoy.WithStoreTimeout(cfg.IdempotencyStoreTimeout)
	l.add(envoy.NewAuthz(store, idem.store, policies, m, idem.events, timeout))
	l.add(envoy.NewExtProc(idem.store, policies, m, idem.events, timeout))
	return l.services, l.err
}

// newGRPCServer registers services, grpc.health.v1 (each service and the
// whole server, "", SERVING) and reflection on one server.
func newGRPCServer(services []grpcService) (*grpc.Server, *health.Server) {
	g := grpc.NewServer()
	for _, svc := range services {
		svc.Register(g)
	}
	hs := health.NewServer()
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
		return fmt.Errorf("grpc listen: %w", err)
	}
	httpLn, err := net.Listen("tcp", httpAddr)
	if err != nil {
		grpcLn.Close()
		return fmt.Errorf("http listen: %w", err)
	}
	s.log.Info("grpc listening", "addr", grpcLn.Addr().String())
	s.log.Info("http listening", "addr", httpLn.Addr().String())

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Go(func() { errc <- s.grpc.Serve(grpcLn) })
	wg.Go(func() { errc <- ignoreClosed(s.http.Serve(httpLn)) })
	watchCtx, stopWatch := context.WithCancel(context.Background())
	if s.policy.run != nil {
		wg.Go(func() { s.watch(watchCtx) })
	}

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "reason", context.Cause(ctx))
	case runErr = <-errc:
		s.log.Error("server failed", "err", runErr)
	}
	s.shutdown()
	stopWatch()
	wg.Wait()
	return runErr
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

// shutdown fails the probes, drains in-flight gRPC calls for at most the
// shutdown timeout (then cuts them), and stops the HTTP server.
func (s *server) shutdown() {
	deadline := time.Now().Add(s.timeout)
	s.draining.Store(true)
	s.health.Shutdown() // every service NOT_SERVING
	drained := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(time.Until(deadline)):
		s.log.Warn("shutdown timeout: cutting in-flight calls", "timeout", s.timeout)
		s.grpc.Stop()
		<-drained
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Second))
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
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
