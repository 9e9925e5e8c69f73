package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/s3blob"
	"github.com/extauthz/extauthz/pkg/policy"
)

// blobSetupTimeout bounds the start-up calls to object storage (the
// lifecycle rule); a slow bucket must not hold up serving.
const blobSetupTimeout = 10 * time.Second

// blobRules are the EXTAUTHZ_BLOB_S3_* and replay variables' rules (see
// Config.rules).
func (c Config) blobRules() []rule {
	on := c.BlobS3Bucket != ""
	return []rule{
		{"BLOB_S3_PART_SIZE", fmt.Sprintf("at least %d bytes (S3's minimum part size)", s3blob.MinPartSize), c.BlobS3PartSize,
			!on || c.BlobS3PartSize >= s3blob.MinPartSize},
		{"BLOB_S3_LIFECYCLE_DAYS", "0 (leave the bucket's lifecycle alone) or more days", c.BlobS3LifecycleDays, c.BlobS3LifecycleDays >= 0},
		{"REPLAY_SECRET", fmt.Sprintf("empty (a random key per process) or at least %d bytes", authz.MinReplaySecret), redactSecret(c.ReplaySecret),
			c.ReplaySecret == "" || len(c.ReplaySecret) >= authz.MinReplaySecret},
		{"REPLAY_ADDR", "host:port with a port 0-65535 when EXTAUTHZ_BLOB_S3_BUCKET is set, e.g. :9002", c.ReplayAddr, !on || validAddr(c.ReplayAddr)},
		{"BLOB_S3_BUCKET", "a bucket name when EXTAUTHZ_BLOB_S3_ENDPOINT is set", c.BlobS3Bucket, on || c.BlobS3Endpoint == ""},
	}
}

// redactSecret shows a secret's length only.
func redactSecret(s string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf("(%d bytes, hidden)", len(s))
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
