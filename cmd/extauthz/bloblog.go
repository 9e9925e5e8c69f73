package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// blobEvents makes object-storage trouble visible as Redis trouble is
// (redisEvents): every failure counted in extauthz_blob_errors_total{op},
// the first of each operation and kind logged at WARN, then one line per
// minute with a count while it lasts. Without it a failing bucket only
// shows as large replies that are no longer replayable.
type blobEvents struct {
	*throttledLog
	errors *prometheus.CounterVec
}

func newBlobEvents(reg prometheus.Registerer, log *slog.Logger) (*blobEvents, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_blob_errors_total",
		Help: "Object storage calls that failed (error, timeout, or a body that does not match its record), by operation; an expired body is not counted.",
	}, []string{"op"})
	if err := reg.Register(c); err != nil {
		return nil, fmt.Errorf("blob metrics: %w", err)
	}
	for _, op := range blob.Ops() { // every series from the start, so rate() sees the first
		c.WithLabelValues(op)
	}
	return &blobEvents{throttledLog: newThrottledLog(log), errors: c}, nil
}

// onError is told of one failed object-storage call (blob.Observe).
func (e *blobEvents) onError(op string, err error) {
	e.errors.WithLabelValues(op).Inc()
	kind := blobErrorKind(err)
	e.warn(op+" "+kind, "object storage error: large replies are not kept or not replayed",
		"op", op, "kind", kind, "err", err)
}

// blobErrorKind names an error's kind for logs: corrupt, timeout,
// connection, or the storage's error code (AccessDenied, NoSuchBucket,
// SlowDown, ...).
func blobErrorKind(err error) string {
	var api smithy.APIError
	var nerr net.Error
	switch {
	case errors.Is(err, blob.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr) && nerr.Timeout():
		return "timeout"
	case errors.As(err, &api):
		return api.ErrorCode()
	case errors.As(err, &nerr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "connection"
	}
	return "other"
}
