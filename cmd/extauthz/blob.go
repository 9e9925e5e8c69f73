package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/s3blob"
	"github.com/extauthz/extauthz/pkg/policy"
)

// blobSetupTimeout bounds the start-up calls to object storage (the
// lifecycle rule); a slow bucket must not hold up serving.
const blobSetupTimeout = 10 * time.Second

// validateBlob checks the EXTAUTHZ_BLOB_S3_* variables.
func (c Config) validateBlob(bad func(name, format string, args ...any)) {
	if c.BlobS3Bucket != "" && c.BlobS3PartSize < s3blob.MinPartSize {
		bad("BLOB_S3_PART_SIZE", "must be at least %d (S3's minimum part size), got %d", s3blob.MinPartSize, c.BlobS3PartSize)
	}
	if c.BlobS3LifecycleDays < 0 {
		bad("BLOB_S3_LIFECYCLE_DAYS", "must not be negative, got %d", c.BlobS3LifecycleDays)
	}
	if n := len(c.ReplaySecret); n > 0 && n < envoy.MinReplaySecret {
		bad("REPLAY_SECRET", "must have at least %d bytes, got %d", envoy.MinReplaySecret, n)
	}
	if c.BlobS3Bucket != "" && c.ReplayAddr == "" {
		bad("REPLAY_ADDR", "must not be empty when EXTAUTHZ_BLOB_S3_BUCKET is set")
	}
	if c.BlobS3Bucket == "" && c.BlobS3Endpoint != "" {
		bad("BLOB_S3_BUCKET", "must be set when EXTAUTHZ_BLOB_S3_ENDPOINT is")
	}
}

// newBlobStore builds the object store for large bodies, or returns nil
// when EXTAUTHZ_BLOB_S3_BUCKET is empty. The lifecycle rule is best effort:
// the credentials may rightly lack s3:PutLifecycleConfiguration when the
// bucket is managed elsewhere, so a failure is a warning.
func newBlobStore(ctx context.Context, cfg Config, log *slog.Logger) (blob.Store, error) {
	if cfg.BlobS3Bucket == "" {
		log.Info("blob store", "kind", "none")
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, blobSetupTimeout)
	defer cancel()
	s, err := s3blob.New(ctx, s3blob.Config{
		Endpoint: cfg.BlobS3Endpoint, Bucket: cfg.BlobS3Bucket, Prefix: cfg.BlobS3Prefix,
		Region: cfg.BlobS3Region, PartSize: cfg.BlobS3PartSize,
	})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_BLOB_S3_*: %w", err)
	}
	if days := cfg.BlobS3LifecycleDays; days > 0 {
		if err := s.EnsureLifecycle(ctx, int32(days)); err != nil {
			log.Warn("blob store lifecycle rule not set; objects expire only by explicit delete", "err", err)
		}
	}
	log.Info("blob store", "kind", "s3", "bucket", cfg.BlobS3Bucket, "prefix", cfg.BlobS3Prefix,
		"endpoint", cfg.BlobS3Endpoint, "lifecycle_days", cfg.BlobS3LifecycleDays)
	return s, nil
}

// lifecycleWarnings lists routes whose record_ttl outlives the bucket
// lifecycle rule extauthz installs: their bodies would expire before their
// records, and replays would answer 503 replay-unavailable.
func lifecycleWarnings(p *policy.Policy, cfg Config) []string {
	if cfg.BlobS3Bucket == "" || cfg.BlobS3LifecycleDays <= 0 || p.HTTP == nil {
		return nil
	}
	limit := time.Duration(cfg.BlobS3LifecycleDays) * 24 * time.Hour
	var out []string
	for _, r := range p.HTTP.Routes {
		if id := r.Idempotency; id != nil && id.RecordTTL > limit {
			out = append(out, fmt.Sprintf("route %q: idempotency.record_ttl %s outlives EXTAUTHZ_BLOB_S3_LIFECYCLE_DAYS=%d: bodies in object storage would expire before their records; raise it to %d",
				r.Name, id.RecordTTL, cfg.BlobS3LifecycleDays, s3blob.LifecycleDays(id.RecordTTL)))
		}
	}
	return out
}
