package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// The debug listener serves Go's profiler to operators
// (EXTAUTHZ_DEBUG_ADDR). Profiles reveal internals (command lines, memory
// contents by type, goroutine stacks) and a CPU profile costs CPU while it
// runs, so it is off by default and bound to loopback only: reach it with
// kubectl port-forward or ssh, never through a Service.

// checkDebugAddr accepts "" (off) and host:port whose host is a loopback
// address or "localhost"; an empty host (every interface) is refused.
func checkDebugAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address (use 127.0.0.1:PORT or [::1]:PORT): profiles must not be reachable from the network", addr)
}

// debugMux routes /debug/pprof/ to net/http/pprof, on its own mux rather
// than http.DefaultServeMux, so nothing else registered there leaks out.
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// startDebug listens on addr (already checked) and serves the profiler
// until the returned stop is called. A listen failure is returned: an
// operator who asked for profiles should learn at once that there are none.
func startDebug(addr string, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_DEBUG_ADDR=%q: %w", addr, err)
	}
	// No write timeout: /debug/pprof/profile streams for ?seconds=.
	srv := &http.Server{Handler: debugMux(), ReadHeaderTimeout: 5 * time.Second}
	log.Warn("pprof debug endpoint enabled; keep it on loopback", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("debug server failed", "err", err)
		}
	}()
	return func() { _ = srv.Close() }, nil
}
