// Package blobconform is the conformance suite every blob.Store passes:
// the S3 adapter runs it against a real S3-compatible server.
package blobconform

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// Options tune the suite to a store.
type Options struct {
	// BigSize is the size of the streamed body test (a few parts for a
	// multipart store); 0 means 12 MiB.
	BigSize int
	// Pending, when set, counts uploads started and neither committed nor
	// aborted (the S3 adapter's multipart uploads); Abort must leave none.
	Pending func(t *testing.T) int
}

// Run runs every conformance test against a store made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) blob.Store, opts Options) {
	if opts.BigSize == 0 {
		opts.BigSize = 12 << 20
	}
	tests := map[string]func(*testing.T, blob.Store, Options){
		"RoundTrip":        testRoundTrip,
		"Empty":            testEmpty,
		"BigStreamed":      testBig,
		"InvisibleUntil":   testInvisibleUntilCommit,
		"AbortLeavesNone":  testAbort,
		"CorruptSize":      testCorruptSize,
		"CorruptSHA":       testCorruptSHA,
		"Delete":           testDelete,
		"NotFound":         testNotFound,
		"FinishedWriter":   testFinishedWriter,
		"OverwriteReplace": testOverwrite,
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newStore(t), opts)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func name(t *testing.T) string {
	return "n-" + hex.EncodeToString(randomBytes(t, 8))
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// put writes body in writes of step bytes and commits it.
func put(t *testing.T, s blob.Store, n string, body []byte, step int) blob.Ref {
	t.Helper()
	w, err := s.Create(ctx(t), n, time.Hour)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	for off := 0; off < len(body); off += step {
		if _, err := w.Write(body[off:min(off+step, len(body))]); err != nil {
			t.Fatalf("Write at %d: %v", off, err)
		}
	}
	ref, err := w.Commit(ctx(t))
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return ref
}

// read opens ref and reads it all.
func read(t *testing.T, s blob.Store, ref blob.Ref) ([]byte, error) {
	t.Helper()
	r, err := s.Open(ctx(t), ref)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func testRoundTrip(t *testing.T, s blob.Store, _ Options) {
	body := []byte(`{"id":42,"status":"created"}`)
	n := name(t)
	ref := put(t, s, n, body, 5)
	want := blob.Ref{Name: n, Size: int64(len(body)), SHA256: sum(body)}
	if ref != want {
		t.Fatalf("ref = %+v, want %+v", ref, want)
	}
	got, err := read(t, s, ref)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read = %q, %v; want %q", got, err, body)
	}
}

func testEmpty(t *testing.T, s blob.Store, _ Options) {
	ref := put(t, s, name(t), nil, 1)
	if ref.Size != 0 || ref.SHA256 != sum(nil) {
		t.Fatalf("ref = %+v, want size 0 and the empty SHA-256", ref)
	}
	if got, err := read(t, s, ref); err != nil || len(got) != 0 {
		t.Fatalf("read = %d bytes, %v; want 0, nil", len(got), err)
	}
}

// testBig streams a body over several parts in writes of an odd size that
// never lines up with a part boundary.
func testBig(t *testing.T, s blob.Store, o Options) {
	body := randomBytes(t, o.BigSize+1)
	ref := put(t, s, name(t), body, 64<<10+7)
	if ref.Size != int64(len(body)) || ref.SHA256 != sum(body) {
		t.Fatalf("ref = %+v, want size %d sha %s", ref, len(body), sum(body))
	}
	got, err := read(t, s, ref)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if sum(got) != sum(body) {
		t.Fatalf("read %d bytes with SHA-256 %s, want %d bytes %s", len(got), sum(got), len(body), sum(body))
	}
}

func testInvisibleUntilCommit(t *testing.T, s blob.Store, o Options) {
	n := name(t)
	body := randomBytes(t, o.BigSize/2)
	w, err := s.Create(ctx(t), n, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if _, err := read(t, s, blob.Ref{Name: n, Size: int64(len(body)), SHA256: sum(body)}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open before Commit: err = %v, want ErrNotFound", err)
	}
	_ = w.Abort(ctx(t))
}

func testAbort(t *testing.T, s blob.Store, o Options) {
	n := name(t)
	body := randomBytes(t, o.BigSize)
	w, err := s.Create(ctx(t), n, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(ctx(t)); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := w.Abort(ctx(t)); err != nil {
		t.Fatalf("second Abort: %v", err)
	}
	if _, err := w.Commit(ctx(t)); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if _, err := read(t, s, blob.Ref{Name: n, Size: int64(len(body)), SHA256: sum(body)}); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open after Abort: err = %v, want ErrNotFound", err)
	}
	if o.Pending != nil {
		if p := o.Pending(t); p != 0 {
			t.Fatalf("%d uploads left pending after Abort", p)
		}
	}
}

func testCorruptSize(t *testing.T, s blob.Store, _ Options) {
	body := []byte(strings.Repeat("x", 1000))
	ref := put(t, s, name(t), body, 100)
	for _, size := range []int64{ref.Size - 1, ref.Size + 1} {
		bad := ref
		bad.Size = size
		if _, err := read(t, s, bad); !errors.Is(err, blob.ErrCorrupt) {
			t.Errorf("size %d (actual %d): err = %v, want ErrCorrupt", size, ref.Size, err)
		}
	}
}

func testCorruptSHA(t *testing.T, s blob.Store, _ Options) {
	body := randomBytes(t, 3000)
	ref := put(t, s, name(t), body, 1000)
	bad := ref
	bad.SHA256 = sum([]byte("something else"))
	if _, err := read(t, s, bad); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("wrong SHA-256: err = %v, want ErrCorrupt", err)
	}
}

func testDelete(t *testing.T, s blob.Store, _ Options) {
	ref := put(t, s, name(t), []byte("gone soon"), 4)
	if err := s.Delete(ctx(t), ref.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := read(t, s, ref); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open after Delete: err = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx(t), ref.Name); err != nil {
		t.Fatalf("Delete of a missing body: %v, want nil", err)
	}
}

func testNotFound(t *testing.T, s blob.Store, _ Options) {
	_, err := read(t, s, blob.Ref{Name: name(t), Size: 1, SHA256: sum([]byte("x"))})
	if !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open of an unknown name: err = %v, want ErrNotFound", err)
	}
}

func testFinishedWriter(t *testing.T, s blob.Store, _ Options) {
	w, err := s.Create(ctx(t), name(t), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("b")); err == nil {
		t.Error("Write after Commit succeeded")
	}
	if _, err := w.Commit(ctx(t)); err == nil {
		t.Error("second Commit succeeded")
	}
}

// testOverwrite: a body committed again under the same name (a key whose
// record expired and was executed anew) replaces the old one whole.
func testOverwrite(t *testing.T, s blob.Store, _ Options) {
	n := name(t)
	put(t, s, n, []byte("first body, longer"), 3)
	ref := put(t, s, n, []byte("second"), 3)
	got, err := read(t, s, ref)
	if err != nil || string(got) != "second" {
		t.Fatalf("read = %q, %v; want %q", got, err, "second")
	}
}
