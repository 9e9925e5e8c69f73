// Command sample-upstream serves the sample API of package upstream, the
// service docker-compose.yaml puts behind Envoy. It listens on ADDR (default
// :8080) and exits on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

func main() {
	if err := run(); err != nil {
		slog.Error("serve", "err", err)
		os.Exit(1)
	}
}

// run serves until SIGTERM or an interrupt, then shuts down gracefully.
func run() error {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8080"
	}
	srv := &http.Server{Addr: addr, Handler: upstream.New(), ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	slog.Info("sample upstream listening", "addr", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
