package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newHTTPServer serves /metrics (reg only), /healthz (the process is alive),
// /readyz (it should receive traffic) and /healthcheck (envoyproxy/ratelimit's
// probe path).
func newHTTPServer(s *server, reg *prometheus.Registry) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if reason := s.notReady(r.Context()); reason != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, reason)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if reason := s.notServing(); reason != "" {
			w.WriteHeader(http.StatusInternalServerError) // the peer's code
			fmt.Fprintln(w, reason)
			return
		}
		fmt.Fprint(w, "OK")
	})
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
}

// notServing says why the server cannot decide at all (draining, or no
// policy yet), or "". It is /healthcheck's answer: Envoy Gateway points its
// liveness probe there too, and a Redis outage, which the failure mode
// answers, must not have the kubelet restart the pod (nor does it fail the
// peer's /healthcheck).
func (s *server) notServing() string {
	if s.draining.Load() {
		return "shutting down"
	}
	if reason := s.policy.policyNotReady(); reason != "" {
		return reason
	}
	return ""
}

// notReady says why the server should not get traffic, or "" when it should.
func (s *server) notReady(ctx context.Context) string {
	if reason := s.notServing(); reason != "" {
		return reason
	}
	if r, ok := s.store.(readiness); ok {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if err := r.Ready(ctx); err != nil {
			return "store not ready: " + err.Error()
		}
	}
	// After the store's own check, which names an unreachable Redis best.
	if reason := s.warm.notReady(); reason != "" {
		return reason
	}
	return ""
}

// startSideListeners starts the metrics listener, then the operators'
// (admin.go), and returns what stops them all.
func startSideListeners(cfg Config, d adminDeps, reg *prometheus.Registry) (stop func(), err error) {
	stopMetrics, err := startMetrics(cfg.MetricsAddr, reg, d.log)
	if err != nil {
		return nil, err
	}
	stopOperator, err := startOperatorListeners(cfg, d)
	if err != nil {
		stopMetrics()
		return nil, err
	}
	return func() { stopOperator(); stopMetrics() }, nil
}

// startMetrics serves /metrics alone on addr (EXTAUTHZ_METRICS_ADDR, the
// peer's PROMETHEUS_ADDR) until the returned stop is called; nothing when
// addr is empty. A listen failure is returned: a scrape target asked for
// must not be silently missing.
func startMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_METRICS_ADDR=%q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	log.Info("metrics listening", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server failed", "err", err)
		}
	}()
	return func() { srv.Close() }, nil
}
