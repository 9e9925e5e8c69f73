package s3blob_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/extauthz/extauthz/internal/s3test"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/blobconform"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/s3blob"
)

// TestConformance runs the blob.Store suite against a real moto server,
// with the minimum part size so that the big body spans three parts.
func TestConformance(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	client := srv.Client()
	newStore := func(t *testing.T) blob.Store {
		s, err := s3blob.NewFromClient(client, s3blob.Config{Bucket: bucket, Prefix: "idem/" + t.Name() + "/", PartSize: s3blob.MinPartSize})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pending := func(t *testing.T) int {
		// Only this subtest's prefix: the others run in parallel.
		prefix := "idem/" + t.Name() + "/"
		out, err := client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket, Prefix: &prefix})
		if err != nil {
			t.Fatalf("ListMultipartUploads: %v", err)
		}
		return len(out.Uploads)
	}
	blobconform.Run(t, newStore, blobconform.Options{BigSize: 12 << 20, Pending: pending})
}

// TestEnvironmentChain builds the store as cmd/extauthz does, from the
// endpoint and the standard AWS_* variables (static keys), and round-trips a
// body through it.
func TestEnvironmentChain(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretAccessKey)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := s3blob.New(ctx, s3blob.Config{Endpoint: srv.Endpoint, Bucket: bucket, Region: s3test.Region, Prefix: "p/"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Create(ctx, "k1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit through the environment's credentials: %v", err)
	}
	key := "p/k1"
	if _, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key}); err != nil {
		t.Fatalf("object not under the prefix: %v", err)
	}
}

// TestLifecycle installs the expiry rule, keeps a rule it does not own, and
// updates its own in place.
func TestLifecycle(t *testing.T) {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := s3blob.NewFromClient(srv.Client(), s3blob.Config{Bucket: bucket, Prefix: "idem/"})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := s.Lifecycle(ctx); err != nil || d != 0 {
		t.Fatalf("Lifecycle of a fresh bucket = %d, %v; want 0, nil", d, err)
	}
	for _, days := range []int32{s3blob.LifecycleDays(24 * time.Hour), s3blob.LifecycleDays(49 * time.Hour)} {
		if err := s.EnsureLifecycle(ctx, days); err != nil {
			t.Fatalf("EnsureLifecycle(%d): %v", days, err)
		}
		if d, err := s.Lifecycle(ctx); err != nil || d != days {
			t.Fatalf("Lifecycle = %d, %v; want %d", d, err, days)
		}
	}
	out, err := srv.Client().GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &bucket})
	if err != nil || len(out.Rules) != 1 {
		t.Fatalf("rules = %d, %v; want exactly one (updated in place)", len(out.Rules), err)
	}
}

func TestLifecycleDays(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int32
	}{{time.Minute, 1}, {24 * time.Hour, 1}, {24*time.Hour + time.Second, 2}, {72 * time.Hour, 3}} {
		if got := s3blob.LifecycleDays(c.ttl); got != c.want {
			t.Errorf("LifecycleDays(%s) = %d, want %d", c.ttl, got, c.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := s3blob.NewFromClient(s3.New(s3.Options{}), s3blob.Config{}); err == nil {
		t.Error("empty bucket accepted")
	}
	if _, err := s3blob.NewFromClient(s3.New(s3.Options{}), s3blob.Config{Bucket: "b", PartSize: 1 << 20}); err == nil {
		t.Error("part size below 5 MiB accepted")
	}
	if _, err := s3blob.NewFromClient(nil, s3blob.Config{Bucket: "b"}); err == nil {
		t.Error("nil client accepted")
	}
}
