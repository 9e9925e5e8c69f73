package s3blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// Open streams the object named by ref, checking its length and SHA-256.
func (s *Store) Open(ctx context.Context, ref blob.Ref) (io.ReadCloser, error) {
	key, err := s.key(ref.Name)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		if isNotFound(err) {
			return nil, blob.ErrNotFound
		}
		return nil, fmt.Errorf("s3blob: get %s: %w", key, err)
	}
	if n := aws.ToInt64(out.ContentLength); out.ContentLength != nil && n != ref.Size {
		_ = out.Body.Close()
		return nil, fmt.Errorf("%w: %s has %d bytes, the record says %d", blob.ErrCorrupt, key, n, ref.Size)
	}
	return &verifier{body: out.Body, ref: ref, sum: sha256.New()}, nil
}

// verifier passes the body through and fails at EOF (or as soon as it runs
// past ref.Size) when the bytes do not match ref.
type verifier struct {
	body io.ReadCloser
	ref  blob.Ref
	sum  hash.Hash
	n    int64
	err  error
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.body.Read(p)
	v.sum.Write(p[:n])
	v.n += int64(n)
	if v.n > v.ref.Size {
		v.err = fmt.Errorf("%w: %s runs past %d bytes", blob.ErrCorrupt, v.ref.Name, v.ref.Size)
		return n, v.err
	}
	if errors.Is(err, io.EOF) {
		v.err = v.check()
		return n, v.err
	}
	return n, err
}

// check compares what was read with the reference; io.EOF when equal.
func (v *verifier) check() error {
	if v.n != v.ref.Size {
		return fmt.Errorf("%w: %s ended at %d bytes, want %d", blob.ErrCorrupt, v.ref.Name, v.n, v.ref.Size)
	}
	if got := hex.EncodeToString(v.sum.Sum(nil)); got != v.ref.SHA256 {
		return fmt.Errorf("%w: %s has SHA-256 %s, want %s", blob.ErrCorrupt, v.ref.Name, got, v.ref.SHA256)
	}
	return io.EOF
}

func (v *verifier) Close() error { return v.body.Close() }

// isNotFound reports S3's answers for a missing object or upload.
func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var nsu *types.NoSuchUpload
	if errors.As(err, &nsk) || errors.As(err, &nf) || errors.As(err, &nsu) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound", "NoSuchUpload":
			return true
		}
	}
	return false
}
