// Package s3blob is a blob.Store on S3-compatible object storage (AWS S3,
// MinIO, SeaweedFS, moto, ...) through aws-sdk-go-v2.
//
// A Writer streams a body as a multipart upload: bytes are buffered up to one
// part (PartSize, 8 MiB by default) and each full part is uploaded before more
// is accepted, so memory stays bounded whatever the body's size. Bodies that
// fit in one part are sent with a single PutObject at Commit. Size and SHA-256
// are computed while writing; Open verifies both while streaming and fails the
// read with blob.ErrCorrupt at EOF when they differ.
//
// Objects are named Prefix + name. Expiry: S3 lifecycle rules have a
// granularity of days and apply to a prefix, so EnsureLifecycle installs one
// rule expiring the prefix after a whole number of days at least as long as
// the longest record TTL; records that end sooner delete their body
// explicitly (blob.Store.Delete).
package s3blob

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// Part sizes: S3 requires every part but the last to be at least 5 MiB, and
// allows at most 10000 parts per upload.
const (
	// DefaultPartSize is the upload part size when Config.PartSize is 0.
	DefaultPartSize = 8 << 20
	// MinPartSize is S3's minimum size of a non-final part.
	MinPartSize = 5 << 20
	// maxParts is S3's limit on parts per multipart upload.
	maxParts = 10000
)

// Config locates the bucket. Credentials come from the SDK's default chain:
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (static keys), or
// AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (web identity, e.g. EKS IRSA),
// shared config files, or the instance role.
type Config struct {
	// Endpoint is the server's URL, e.g. http://127.0.0.1:9000; empty uses
	// AWS's regional endpoint. A custom endpoint is addressed path-style
	// (bucket in the path), which S3-compatible servers expect.
	Endpoint string
	// Bucket holds the bodies; required.
	Bucket string
	// Prefix starts every object name, e.g. "extauthz/idem/"; may be empty.
	Prefix string
	// Region is the bucket's region; empty uses the SDK's default chain
	// (AWS_REGION), then us-east-1.
	Region string
	// PartSize is the multipart part size and so the Writer's memory bound
	// (default 8 MiB; at least 5 MiB).
	PartSize int
}

// Store is a blob.Store on one bucket and prefix.
type Store struct {
	client   *s3.Client
	bucket   string
	prefix   string
	partSize int
}

var _ blob.Store = (*Store)(nil)

// New builds a Store with credentials and region from the SDK's default
// chain (see Config).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3blob: aws config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
		}
		// Checksums only where S3 requires them: many S3-compatible
		// servers reject or ignore the SDK's default CRC trailers, and the
		// body's integrity is checked end to end by SHA-256 on Open.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return NewFromClient(client, cfg)
}

// NewFromClient builds a Store on an existing client (cfg.Endpoint and
// cfg.Region are then ignored).
func NewFromClient(client *s3.Client, cfg Config) (*Store, error) {
	if client == nil {
		return nil, errors.New("s3blob: nil client")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ps := cfg.PartSize
	if ps == 0 {
		ps = DefaultPartSize
	}
	return &Store{client: client, bucket: cfg.Bucket, prefix: cfg.Prefix, partSize: ps}, nil
}

func (c Config) validate() error {
	var errs []error
	if c.Bucket == "" {
		errs = append(errs, errors.New("bucket must not be empty"))
	}
	if c.PartSize != 0 && c.PartSize < MinPartSize {
		errs = append(errs, fmt.Errorf("part size %d is below S3's minimum %d", c.PartSize, MinPartSize))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("s3blob: %w", err)
	}
	return nil
}

// MaxBodySize is the largest body a Writer accepts (S3's part limit times
// the part size).
func (s *Store) MaxBodySize() int64 { return int64(s.partSize) * maxParts }

// key is the object key of name.
func (s *Store) key(name string) (string, error) {
	if name == "" || strings.Contains(name, "..") {
		return "", fmt.Errorf("s3blob: invalid name %q", name)
	}
	return s.prefix + name, nil
}

// Create starts a body under name. The upload begins lazily: a body that
// fits in one part costs a single PutObject at Commit.
func (s *Store) Create(_ context.Context, name string, ttl time.Duration) (blob.Writer, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	return newWriter(s, name, key, ttl), nil
}

// Delete removes a body; S3 answers success for a missing key.
func (s *Store) Delete(ctx context.Context, name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("s3blob: delete %s: %w", key, err)
	}
	return nil
}

// Close has nothing to release (the SDK's HTTP client is shared); safe to
// call twice.
func (s *Store) Close() error { return nil }
