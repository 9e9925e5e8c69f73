package s3blob_test

import (
	"context"
	"crypto/rand"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/s3test"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/s3blob"
)

// BenchmarkWriteOpen streams a 20 MiB body into a real moto server in
// 64 KiB writes (as ext_proc chunks arrive), commits it, and reads it back
// verified: b.SetBytes makes `go test -bench` report MB/s for each way.
//
//	go test -run '^$' -bench . -benchtime 5x ./pkg/idempotency/blob/s3blob/
func BenchmarkWriteOpen(b *testing.B) {
	srv := s3test.Shared(b)
	bucket := srv.NewBucket(b)
	s, err := s3blob.NewFromClient(srv.Client(), s3blob.Config{Bucket: bucket, PartSize: s3blob.DefaultPartSize})
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	_, _ = rand.Read(chunk)
	const size = 20 << 20
	ctx := context.Background()
	b.Run("write", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			w, _ := s.Create(ctx, "w"+strconv.Itoa(i), time.Hour)
			for n := 0; n < size; n += len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := w.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	w, _ := s.Create(ctx, "r", time.Hour)
	for n := 0; n < size; n += len(chunk) {
		_, _ = w.Write(chunk)
	}
	ref, err := w.Commit(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("open", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			r, err := s.Open(ctx, ref)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				b.Fatal(err)
			}
			_ = r.Close()
		}
	})
}
