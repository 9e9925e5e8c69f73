package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
)

// TestRedisEventsLogOncePerKind: the first error of each kind is logged at
// WARN, repeats within a minute are counted, not logged, and the next line
// says how many there were.
func TestRedisEventsLogOncePerKind(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := newRedisEvents(slog.New(slog.NewTextHandler(&buf, nil)), true)
	now := time.Unix(1000, 0)
	e.now = func() time.Time { return now }
	timeout := fmt.Errorf("redisstore: %w", context.DeadlineExceeded)
	for range 5 {
		e.onError("ratelimit", "n1", timeout)
	}
	e.onError("ratelimit", "n1", redis.ErrClosed)
	e.onError("idempotency", "", timeout)
	if got := strings.Count(buf.String(), "level=WARN"); got != 3 {
		t.Fatalf("%d WARN lines, want 3 (ratelimit timeout, ratelimit other, idempotency timeout):\n%s", got, buf.String())
	}
	now = now.Add(logEvery)
	e.onError("ratelimit", "n1", timeout)
	if !strings.Contains(buf.String(), "more_since_last_logged=4") {
		t.Errorf("a minute later: want a line counting the 4 unlogged timeouts:\n%s", buf.String())
	}
	e.onChange("ratelimit", "n1", true, timeout)
	e.onChange("ratelimit", "n1", false, nil)
	for _, want := range []string{"level=INFO msg=\"redis circuit breaker open", "level=INFO msg=\"redis circuit breaker closed"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, buf.String())
		}
	}
	if err := e.Ready(context.Background()); err != nil {
		t.Errorf("Ready() = %v, want nil", err)
	}
}

func TestRedisErrorKind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{errors.New("something"), "other"},
	} {
		if got := redisErrorKind(c.err); got != c.want {
			t.Errorf("redisErrorKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestStandaloneClientOnClusterNode: EXTAUTHZ_REDIS_URL names one node of a
// cluster without EXTAUTHZ_REDIS_CLUSTER=true. Keys on the other nodes get
// MOVED: the process says to set the variable, once, and /readyz fails.
// The replica count's key (<prefix>:replicas, slot 6873 for xa) lives on
// another node than the first, so its first beat after warm-up may find the
// mistake before any decision does.
func TestStandaloneClientOnClusterNode(t *testing.T) {
	cl := redistest.NewCluster(t)
	p := start(t, append([]string{"EXTAUTHZ_CONFIG=" + writePolicy(t), "EXTAUTHZ_REDIS_URL=redis://" + cl.Addrs[0]}, patient...)...)
	waitServing(t, p, 10*time.Second) // warm-up: connections and scripts on the node
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	for i := range 20 { // two thirds of the users' keys live on other nodes
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprint("user", i)}},
		}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	code, body := p.get(t, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "set EXTAUTHZ_REDIS_CLUSTER=true") {
		t.Errorf("/readyz = %d %q, want 503 saying to set EXTAUTHZ_REDIS_CLUSTER=true", code, body)
	}
	if logs := p.Logs(); strings.Count(logs, `"msg":"redis is a cluster: set EXTAUTHZ_REDIS_CLUSTER=true`) != 1 ||
		!strings.Contains(logs, `"level":"ERROR","msg":"redis is a cluster`) {
		t.Errorf("logs lack one ERROR line saying to set EXTAUTHZ_REDIS_CLUSTER=true:\n%s", logs)
	}
}

// TestRedisOutageIsLogged: Redis going away is logged at WARN (once per
// kind) and the breaker's opening and closing at INFO.
func TestRedisOutageIsLogged(t *testing.T) {
	srv := redistest.Standalone(t)
	p := start(t, "EXTAUTHZ_CONFIG="+writePolicy(t), "EXTAUTHZ_REDIS_URL="+srv.URL, "EXTAUTHZ_REDIS_BREAKER_PAUSE=100ms")
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "shared", Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}},
		}}}); err != nil {
			t.Fatal(err)
		}
	}
	call()
	srv.Stop()
	for range 10 {
		call()
	}
	srv.Start()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.Logs(), "redis circuit breaker closed") && time.Now().Before(deadline) {
		time.Sleep(150 * time.Millisecond) // past the 100ms pause: the next call is a probe
		call()
	}
	logs := p.Logs()
	if strings.Count(logs, `"msg":"redis error"`) != 1 || !strings.Contains(logs, `"level":"WARN","msg":"redis error","store":"ratelimit","kind":"connection"`) {
		t.Errorf("want one WARN line for the connection errors:\n%s", logs)
	}
	for _, want := range []string{`"level":"INFO","msg":"redis circuit breaker open`, `"level":"INFO","msg":"redis circuit breaker closed`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

// TestExplainRedisTLS: a refused handshake says what to set; other errors
// pass unchanged and still match with errors.Is.
func TestExplainRedisTLS(t *testing.T) {
	base := errors.New("redisstore: load script")
	cases := []struct {
		err  error
		want string // in the message; "" means unchanged
	}{
		{fmt.Errorf("%w", errors.New("remote error: tls: certificate required")), "set EXTAUTHZ_REDIS_TLS_CLIENT_CERT and _KEY"},
		{fmt.Errorf("%w: remote error: tls: unknown certificate authority", base), "refused the client certificate of EXTAUTHZ_REDIS_TLS_CLIENT_CERT"},
		{fmt.Errorf("%w: remote error: tls: bad certificate", base), "refused the client certificate of EXTAUTHZ_REDIS_TLS_CLIENT_CERT"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), ""},
	}
	for _, tc := range cases {
		got := explainRedisTLS(tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%v: the explained error %v no longer wraps it", tc.err, got)
		}
		if tc.want == "" && got.Error() != tc.err.Error() || tc.want != "" && !strings.Contains(got.Error(), tc.want) {
			t.Errorf("%v: explained as %q, want %q", tc.err, got, tc.want)
		}
	}
	if explainRedisTLS(nil) != nil {
		t.Error("nil explained as an error")
	}
}
