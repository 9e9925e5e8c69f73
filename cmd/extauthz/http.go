package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newHTTPServer serves /metrics (reg only), /healthz (the process is alive)
// and /readyz (it should receive traffic).
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
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
}

// notReady says why the server should not get traffic, or "" when it should.
func (s *server) notReady(ctx context.Context) string {
	if s.draining.Load() {
		return "shutting down"
	}
	if reason := s.policy.policyNotReady(); reason != "" {
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
