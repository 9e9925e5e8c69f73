package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/s3test"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/s3blob"
)

// TestBlobTroubleVisible: with the S3 server gone, the store's failures are
// counted by operation, and logged at WARN once per operation and kind,
// then again a minute later with the count of those not logged.
func TestBlobTroubleVisible(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretAccessKey)
	cfg := Config{BlobS3Bucket: srv.NewBucket(t), BlobS3Endpoint: srv.Endpoint, BlobS3PartSize: s3blob.MinPartSize}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	reg := prometheus.NewRegistry()
	events, err := newBlobEvents(reg, log)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	events.now = func() time.Time { return now }
	raw, err := newBlobStore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s := blob.Observe(raw, events.onError)
	ref := put(t, s, "ok", "a body")
	if _, err := s.Open(context.Background(), blob.Ref{Name: "gone", Size: 1}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open of a missing body: %v, want ErrNotFound", err)
	}
	if n := blobErrors(t, reg, ""); n != 0 || buf.Len() != 0 {
		t.Fatalf("a working store: %v errors counted, logs %q; want none (a missing body is not a failure)", n, buf.String())
	}

	srv.Stop()
	for range 3 {
		openFails(t, s, ref)
	}
	w, err := s.Create(context.Background(), "new", time.Hour) // s3blob calls the server on commit
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(w, "another body")
	if _, err := w.Commit(context.Background()); err == nil {
		t.Fatal("Commit with the S3 server stopped: no error")
	}
	got := buf.String()
	if n := strings.Count(got, "level=WARN"); n != 2 || !strings.Contains(got, "op=open kind=connection") || !strings.Contains(got, "op=commit kind=connection") {
		t.Fatalf("%d WARN lines after 3 failed opens and a failed commit, want 2 (op=open, op=commit; kind=connection):\n%s", n, got)
	}
	if o, c := blobErrors(t, reg, blob.OpOpen), blobErrors(t, reg, blob.OpCommit); o != 3 || c != 1 {
		t.Errorf("extauthz_blob_errors_total: open %v, commit %v; want 3 and 1", o, c)
	}
	now = now.Add(logEvery)
	openFails(t, s, ref)
	if n := strings.Count(buf.String(), "level=WARN"); n != 3 || !strings.Contains(buf.String(), "more_since_last_logged=2") {
		t.Errorf("a minute later: %d WARN lines, want 3, the last counting the 2 opens not logged:\n%s", n, buf.String())
	}
	t.Logf("logs:\n%s", buf.String())
}

// put stores body under name through s.
func put(t *testing.T, s blob.Store, name, body string) blob.Ref {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := s.Create(ctx, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, body); err != nil {
		t.Fatal(err)
	}
	ref, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func openFails(t *testing.T, s blob.Store, ref blob.Ref) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r, err := s.Open(ctx, ref); err == nil {
		_ = r.Close()
		t.Fatal("Open with the S3 server stopped: no error")
	}
}

// blobErrors reads extauthz_blob_errors_total for op ("" sums every op).
func blobErrors(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "extauthz_blob_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if op == "" || m.GetLabel()[0].GetValue() == op {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

func TestBlobErrorKind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("s3blob: %w", blob.ErrCorrupt), "corrupt"},
		{fmt.Errorf("s3blob: get: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("s3blob: get: %w", io.ErrUnexpectedEOF), "connection"},
		{errors.New("something"), "other"},
	} {
		if got := blobErrorKind(c.err); got != c.want {
			t.Errorf("blobErrorKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
