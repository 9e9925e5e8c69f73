package rlqs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotaredis"
)

// blockingStore is a demand store that answers nothing: every call waits
// for its context to end, as a Redis that stopped answering does.
type blockingStore struct{}

func (blockingStore) Report(ctx context.Context, _, _ string, _ float64, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

func (blockingStore) Demands(ctx context.Context, _ string, _ time.Time) (map[string]float64, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (blockingStore) GrowGrant(ctx context.Context, _ quota.Grant, _ float64, _ time.Time) (float64, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

func (blockingStore) SetGrant(ctx context.Context, _ quota.Grant, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

func (blockingStore) OrphanGrant(ctx context.Context, _ quota.Grant, _ time.Time) error {
	<-ctx.Done()
	return ctx.Err()
}

// perTenantPolicy limits every tenant, each value its own budget.
func perTenantPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "quota.yaml")
	src := "domain: quota\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 10}\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A report of many buckets on a store that does not answer is answered
// within one report deadline, not one store timeout per bucket after
// another: every bucket gets the failure mode's answer (fail open, nothing
// sent before: ALLOW_ALL) in one message. Before the deadline existed, 40
// buckets at 250 ms each held the stream for 10 s.
func TestReportOnAStuckStoreIsAnsweredWithinItsDeadline(t *testing.T) {
	t.Parallel()
	p := perTenantPolicy(t)
	h := newHarness(t, Options{Policy: func() *policy.Policy { return p }}, blockingStore{})
	c := h.open(t)
	const n = 40
	us := make([]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, 0, n)
	for i := range n {
		us = append(us, usage(map[string]string{"tenant": fmt.Sprintf("t%02d", i)}, 1, 0))
	}
	start := time.Now()
	send(t, c, "quota", us...)
	got := recv(t, c)
	took := time.Since(start)
	// The default deadline is 1 s; 3 s leaves room for a loaded machine and
	// is far below the 10 s of one timeout per bucket.
	if took > 3*time.Second {
		t.Errorf("the report was answered after %s, want within its deadline (1s)", took)
	}
	if len(got) != n {
		t.Fatalf("%d buckets answered, want all %d", len(got), n)
	}
	for tenant, s := range got {
		if blanket(s) != "ALLOW_ALL" {
			t.Errorf("%s: %v, want ALLOW_ALL (fail open, nothing sent before)", tenant, s)
		}
	}
	if g := value(t, h.srv.metrics.storeErrors.WithLabelValues("open")); g < 1 {
		t.Errorf("store_errors_total{mode=open} = %v, want the failures counted", g)
	}
}

var _ quota.DemandStore = blockingStore{}

// The same on a real Redis whose clients are paused (CLIENT PAUSE), through
// a client built as extauthz builds it (context deadlines honoured) with a
// read timeout longer than the store timeout: every store call hangs until
// its 250 ms timeout, and the report of 40 buckets is still answered within
// its deadline, each bucket with the failure mode's answer.
func TestReportOnAPausedRedisIsAnsweredWithinItsDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	client, err := redisclient.New(redisclient.Options{URL: "redis://" + srv.Addr, ReadTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store, err := quotaredis.New(client, quotaredis.Options{Prefix: "t"})
	if err != nil {
		t.Fatal(err)
	}
	p := perTenantPolicy(t)
	h := newHarness(t, Options{Policy: func() *policy.Policy { return p }}, store)
	c := h.open(t)
	if err := client.Do(context.Background(), "CLIENT", "PAUSE", "30000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	const n = 40
	us := make([]*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage, 0, n)
	for i := range n {
		us = append(us, usage(map[string]string{"tenant": fmt.Sprintf("t%02d", i)}, 1, 0))
	}
	start := time.Now()
	send(t, c, "quota", us...)
	got := recv(t, c)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the report was answered after %s, want within its deadline (1s)", took)
	}
	if len(got) != n {
		t.Fatalf("%d buckets answered, want all %d", len(got), n)
	}
	for tenant, s := range got {
		if blanket(s) != "ALLOW_ALL" {
			t.Errorf("%s: %v, want ALLOW_ALL (fail open, nothing sent before)", tenant, s)
		}
	}
}
