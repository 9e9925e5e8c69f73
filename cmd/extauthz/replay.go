package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// replayDeps is object storage for large bodies: the options that let
// ext_proc store bodies over max_body_bytes there and ext_authz/ext_proc
// issue replay tickets, and the HTTP server that honours the tickets. All
// unset without EXTAUTHZ_BLOB_S3_BUCKET.
type replayDeps struct {
	options []authz.IdempotencyOption
	server  *http.Server
	blobs   blob.Store
}

// newReplay builds the blob store and, with one, the replay endpoint on
// EXTAUTHZ_REPLAY_ADDR. The replay server has no write timeout: a body of
// 100 MiB to a slow client takes as long as it takes; Envoy's route
// timeout bounds it. The store's failures are logged and counted
// (blobEvents): its callers degrade quietly (a large reply becomes not
// replayable), so nothing else would show them.
func newReplay(ctx context.Context, cfg Config, idem idempotencyDeps, reg prometheus.Registerer, log *slog.Logger) (replayDeps, error) {
	// Registered without a bucket too: dashboards and alerts see zeros.
	events, err := newBlobEvents(reg, log)
	if err != nil {
		return replayDeps{}, err
	}
	blobs, err := newBlobStore(ctx, cfg, log)
	if err != nil || blobs == nil {
		return replayDeps{}, err
	}
	blobs = blob.Observe(blobs, events.onError)
	if cfg.ReplaySecret == "" {
		log.Warn("EXTAUTHZ_REPLAY_SECRET is empty: replay tickets are signed with a per-process key; with more than one replica, set the same secret on all")
	}
	r, err := authz.NewReplayer([]byte(cfg.ReplaySecret), nil)
	if err != nil {
		_ = blobs.Close()
		return replayDeps{}, err
	}
	h, err := authz.NewReplayHandler(r, blobs, idem.events)
	if err != nil {
		_ = blobs.Close()
		return replayDeps{}, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	srv := &http.Server{Addr: cfg.ReplayAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	opts := []authz.IdempotencyOption{authz.WithReplay(r), authz.WithBlobStore(blobs)}
	return replayDeps{options: opts, server: srv, blobs: blobs}, nil
}

func (r replayDeps) close(log *slog.Logger) {
	if r.blobs == nil {
		return
	}
	if err := r.blobs.Close(); err != nil {
		log.Error("closing blob store", "err", err)
	}
}
