package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	idemredis "github.com/extauthz/extauthz/pkg/idempotency/redisstore"
)

// TestRedisRestartWithAOF: Redis persisting with appendfsync everysec
// crashes (SIGKILL) more than a second after the last writes and comes
// back. Meanwhile the service answers every call by its failure mode
// (closed: deny) and /readyz fails; afterwards the rate-limit counts, an
// idempotency lease and a completed record are all still there.
func TestRedisRestartWithAOF(t *testing.T) {
	srv := redistest.StandaloneAOF(t)
	p := start(t, append([]string{"EXTAUTHZ_CONFIG=" + writePolicy(t), "EXTAUTHZ_REDIS_URL=" + srv.URL,
		"EXTAUTHZ_FAILURE_MODE=closed", "EXTAUTHZ_LOCAL_CACHE=false"}, patient...)...)
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	call := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "persisted"}},
		}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v (the failure mode must answer)", err)
		}
		return resp.GetOverallCode()
	}
	for i := range 60 {
		if code := call(); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d before the restart: %v", i, code)
		}
	}
	idem, err := idemredis.New(srv.Client(), idemredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ttls := idempotency.TTLs{Lease: time.Minute, Record: time.Hour}
	if o, err := idem.Begin(ctx, "s", "leased", idempotency.Fingerprint{}, ttls); err != nil || o.Kind != idempotency.Acquired {
		t.Fatalf("Begin leased: %v %v", o.Kind, err)
	}
	o, err := idem.Begin(ctx, "s", "done", idempotency.Fingerprint{}, ttls)
	if err != nil || o.Kind != idempotency.Acquired {
		t.Fatalf("Begin done: %v %v", o.Kind, err)
	}
	if err := idem.Complete(ctx, o.Lease, idempotency.Response{Status: 201, Body: []byte("made")}); err != nil {
		t.Fatal(err)
	}

	time.Sleep(1500 * time.Millisecond) // past the next everysec fsync
	srv.Kill()
	for range 5 {
		if code := call(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("with Redis down in closed mode: %v, want OVER_LIMIT", code)
		}
	}
	if code, body := p.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with Redis down = %d %q, want 503", code, body)
	}

	srv.Start()
	waitReady(t, p)
	for i := range 40 {
		if code := call(); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d after the restart: %v, want OK (60 of 100 spent before)", 60+i, code)
		}
	}
	if code := call(); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("call 101: %v, want OVER_LIMIT: the count did not survive the restart", code)
	}
	if o, err := idem.Begin(ctx, "s", "leased", idempotency.Fingerprint{}, ttls); err != nil || o.Kind != idempotency.InProgress {
		t.Errorf("Begin on the leased key after the restart: %v %v, want InProgress", o.Kind, err)
	}
	if o, err := idem.Begin(ctx, "s", "done", idempotency.Fingerprint{}, ttls); err != nil || o.Kind != idempotency.Replay || o.Response.Status != 201 {
		t.Errorf("Begin on the completed key after the restart: %v %v, want a Replay of 201", o.Kind, err)
	}
}

// waitReady polls /readyz until 200.
func waitReady(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := p.get(t, "/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 20s after Redis restarted = %d %q", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
