package s3blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// Errors of a Writer used out of order.
var (
	errFinished = errors.New("s3blob: writer already committed or aborted")
	errTooLarge = errors.New("s3blob: body exceeds the multipart upload limit")
)

// writer streams one body. Not safe for concurrent use (a body arrives in
// order from one stream).
type writer struct {
	s       *Store
	name    string
	key     string
	expires time.Time

	buf      []byte // the part being filled, cap partSize
	size     int64
	sum      hash.Hash
	uploadID *string // set once the multipart upload has started
	parts    []types.CompletedPart
	done     bool
	err      error // a failed part upload; the writer is then unusable
}

var _ blob.Writer = (*writer)(nil)

func newWriter(s *Store, name, key string, ttl time.Duration) *writer {
	w := &writer{s: s, name: name, key: key, sum: sha256.New()}
	if ttl > 0 {
		w.expires = time.Now().Add(ttl)
	}
	return w
}

// Write buffers p, uploading each full part before accepting more. Its
// context is background-bounded by the SDK's own timeouts: io.Writer has
// none, so callers that need one cancel through Abort.
func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, errFinished
	}
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		room := w.s.partSize - len(w.buf)
		chunk := p[:min(room, len(p))]
		if w.buf == nil {
			w.buf = make([]byte, 0, w.s.partSize)
		}
		w.buf = append(w.buf, chunk...)
		w.sum.Write(chunk)
		w.size += int64(len(chunk))
		n += len(chunk)
		p = p[len(chunk):]
		if len(w.buf) == w.s.partSize {
			if err := w.flush(context.Background()); err != nil {
				w.err = err
				return n, err
			}
		}
	}
	return n, nil
}

// flush uploads the buffered bytes as the next part.
func (w *writer) flush(ctx context.Context) error {
	if len(w.parts) == maxParts {
		return errTooLarge
	}
	if w.uploadID == nil {
		in := &s3.CreateMultipartUploadInput{Bucket: &w.s.bucket, Key: &w.key}
		if !w.expires.IsZero() {
			in.Expires = aws.Time(w.expires)
		}
		out, err := w.s.client.CreateMultipartUpload(ctx, in)
		if err != nil {
			return fmt.Errorf("s3blob: start upload %s: %w", w.key, err)
		}
		w.uploadID = out.UploadId
	}
	num := int32(len(w.parts) + 1)
	out, err := w.s.client.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID,
		PartNumber: aws.Int32(num), Body: bytes.NewReader(w.buf),
		ContentLength: aws.Int64(int64(len(w.buf))),
	})
	if err != nil {
		return fmt.Errorf("s3blob: upload part %d of %s: %w", num, w.key, err)
	}
	w.parts = append(w.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
	w.buf = w.buf[:0]
	return nil
}

// Commit uploads what remains and makes the object visible.
func (w *writer) Commit(ctx context.Context) (blob.Ref, error) {
	if w.done {
		return blob.Ref{}, errFinished
	}
	if w.err != nil {
		return blob.Ref{}, w.err
	}
	var err error
	if w.uploadID == nil {
		err = w.put(ctx)
	} else {
		err = w.complete(ctx)
	}
	if err != nil {
		return blob.Ref{}, err
	}
	w.done = true
	w.buf = nil
	return blob.Ref{Name: w.name, Size: w.size, SHA256: hex.EncodeToString(w.sum.Sum(nil))}, nil
}

// put stores a body that never filled a part in one request.
func (w *writer) put(ctx context.Context) error {
	in := &s3.PutObjectInput{
		Bucket: &w.s.bucket, Key: &w.key,
		Body: bytes.NewReader(w.buf), ContentLength: aws.Int64(int64(len(w.buf))),
	}
	if !w.expires.IsZero() {
		in.Expires = aws.Time(w.expires)
	}
	if _, err := w.s.client.PutObject(ctx, in); err != nil {
		return fmt.Errorf("s3blob: put %s: %w", w.key, err)
	}
	return nil
}

// complete uploads the last (possibly short, possibly empty) part and
// completes the multipart upload.
func (w *writer) complete(ctx context.Context) error {
	if len(w.buf) > 0 {
		if err := w.flush(ctx); err != nil {
			w.err = err
			return err
		}
	}
	_, err := w.s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.parts},
	})
	if err != nil {
		return fmt.Errorf("s3blob: complete %s: %w", w.key, err)
	}
	return nil
}

// Abort discards the upload's parts. Nothing was visible under the name, so
// nothing else is removed. Safe to call twice and after a failed Commit.
func (w *writer) Abort(ctx context.Context) error {
	if w.done {
		return nil
	}
	w.done = true
	w.buf = nil
	if w.uploadID == nil {
		return nil
	}
	_, err := w.s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: &w.s.bucket, Key: &w.key, UploadId: w.uploadID,
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("s3blob: abort %s: %w", w.key, err)
	}
	return nil
}
