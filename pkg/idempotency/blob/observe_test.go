package blob_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/blobtest"
)

// reports collects what an observed store reports.
type reports struct {
	mu  sync.Mutex
	got []string
}

func (r *reports) add(op string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, op+": "+err.Error())
}

func (r *reports) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.got, "; ")
}

// TestObserveReportsFailures: every failure of the store, its writers and
// readers is reported once with its operation; a body that is gone and a
// caller that cancelled are not failures; answers pass through unchanged.
func TestObserveReportsFailures(t *testing.T) {
	t.Parallel()
	inner := blobtest.New()
	var r reports
	s := blob.Observe(inner, r.add)
	ctx := context.Background()
	w, err := s.Create(ctx, "a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(w, "body")
	ref, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	body, err := s.Open(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(body); err != nil || string(b) != "body" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := s.Open(ctx, blob.Ref{Name: "gone"}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open of a missing body: %v", err)
	}
	if r.String() != "" {
		t.Fatalf("a working store reported %q", r.String())
	}

	if _, err := s.Open(ctx, blob.Ref{Name: "a", Size: 99}); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("Open with a wrong size: %v, want ErrCorrupt", err)
	}
	inner.Fail.Store(true)
	if _, err := s.Create(ctx, "b", time.Hour); !errors.Is(err, blobtest.ErrDown) {
		t.Fatalf("Create on a failing store: %v", err)
	}
	_, _ = w.Write([]byte("x"))
	_, _ = w.Commit(ctx)
	want := fmt.Sprintf("open: %v; create: %v; write: %v; commit: %v", blob.ErrCorrupt, blobtest.ErrDown, blobtest.ErrDown, blobtest.ErrDown)
	if r.String() != want {
		t.Errorf("reported %q\nwant     %q", r.String(), want)
	}
}

// TestObserveReadFailsOnce: a body whose reads fail is reported once,
// however often the caller retries the read; one cancelled by its caller
// is not reported.
func TestObserveReadFailsOnce(t *testing.T) {
	t.Parallel()
	down := errors.New("connection reset")
	var r reports
	s := blob.Observe(&readFailing{err: down}, r.add)
	body, err := s.Open(context.Background(), blob.Ref{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = body.Read(make([]byte, 8))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s = blob.Observe(&readFailing{err: context.Canceled}, r.add)
	body, _ = s.Open(ctx, blob.Ref{Name: "a"})
	cancel()
	_, _ = body.Read(make([]byte, 8))
	if want := "read: connection reset"; r.String() != want {
		t.Errorf("reported %q, want %q", r.String(), want)
	}
}

// readFailing opens bodies whose every read fails with err.
type readFailing struct {
	blobtest.Store
	err error
}

func (f *readFailing) Open(context.Context, blob.Ref) (io.ReadCloser, error) {
	return io.NopCloser(iotest.ErrReader(f.err)), nil
}
