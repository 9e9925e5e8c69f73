package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/s3test"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/s3blob"
	"github.com/extauthz/extauthz/pkg/policy"
)

func TestBlobConfigValidate(t *testing.T) {
	t.Parallel()
	base := Config{GRPCAddr: ":1", HTTPAddr: ":2", LogLevel: "info", ShutdownTimeout: 1, FailureMode: "open"}
	bad := base
	bad.BlobS3Bucket, bad.BlobS3PartSize, bad.BlobS3LifecycleDays = "b", 1<<20, -1
	err := bad.Validate()
	for _, name := range []string{"BLOB_S3_PART_SIZE", "BLOB_S3_LIFECYCLE_DAYS"} {
		if err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_"+name) {
			t.Errorf("Validate() = %v, want a problem with EXTAUTHZ_%s", err, name)
		}
	}
	orphan := base
	orphan.BlobS3Endpoint = "http://127.0.0.1:1"
	if err := orphan.Validate(); err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_BLOB_S3_BUCKET") {
		t.Errorf("endpoint without bucket: Validate() = %v, want a problem with EXTAUTHZ_BLOB_S3_BUCKET", err)
	}
}

// TestNewBlobStore builds the store from the environment against a real
// S3-compatible server, as serve does, and checks the lifecycle rule.
func TestNewBlobStore(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretAccessKey)
	cfg := Config{BlobS3Bucket: bucket, BlobS3Endpoint: srv.Endpoint, BlobS3Prefix: "x/", BlobS3PartSize: s3blob.MinPartSize, BlobS3LifecycleDays: 2}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := newBlobStore(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if days, err := s.(*s3blob.Store).Lifecycle(ctx); err != nil || days != 2 {
		t.Fatalf("lifecycle = %d days, %v; want 2", days, err)
	}
	if none, err := newBlobStore(context.Background(), Config{}, log); none != nil || err != nil {
		t.Fatalf("no bucket: store %v, err %v; want nil, nil", none, err)
	}
}

func TestLifecycleWarnings(t *testing.T) {
	t.Parallel()
	p := &policy.Policy{HTTP: &policy.HTTP{Routes: []*policy.Route{
		{Name: "short", Idempotency: &policy.Idempotency{RecordTTL: 24 * time.Hour}},
		{Name: "long", Idempotency: &policy.Idempotency{RecordTTL: 50 * time.Hour}},
		{Name: "plain"},
	}}}
	got := lifecycleWarnings(p, Config{BlobS3Bucket: "b", BlobS3LifecycleDays: 1})
	if len(got) != 1 || !strings.Contains(got[0], `route "long"`) || !strings.Contains(got[0], "raise it to 3") {
		t.Fatalf("warnings = %q, want one for route long (raise to 3 days)", got)
	}
	for _, cfg := range []Config{{BlobS3LifecycleDays: 1}, {BlobS3Bucket: "b"}} {
		if got := lifecycleWarnings(p, cfg); len(got) != 0 {
			t.Errorf("%+v: warnings %q, want none (no bucket, or lifecycle not managed)", cfg, got)
		}
	}
}
