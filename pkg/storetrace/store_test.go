package storetrace

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// failingRL and failingIdem fail every call with err.
type failingRL struct {
	ratelimit.Store
	err error
}

type failingIdem struct {
	idempotency.Store
	err error
}

func (f failingRL) AllowBatch(context.Context, []ratelimit.Request) ([]ratelimit.Decision, error) {
	return nil, f.err
}

func (f failingIdem) Begin(context.Context, string, string, idempotency.Fingerprint, idempotency.TTLs) (idempotency.Outcome, error) {
	return idempotency.Outcome{}, f.err
}

// TestStoreSpansRecordErrorClasses: a failed store call is an Error span
// whose error.type is the class, never the key it was about.
func TestStoreSpansRecordErrorClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("redisstore: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("begin: %w", idempotency.ErrLeaseLost), "lease_lost"},
		{idempotency.ErrUnavailable, "unavailable"},
		{errors.New("dial tcp: connection refused"), "store"},
	} {
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		rl := RateLimitStore(failingRL{err: c.err}, tp, BackendRedis)
		idem := IdempotencyStore(failingIdem{err: c.err}, tp, BackendRedis)
		_, _ = rl.AllowBatch(context.Background(), []ratelimit.Request{{Key: "tenant-7|secret", Limits: []ratelimit.Limit{
			{Requests: 1, Period: time.Second}, {Algorithm: ratelimit.FixedWindow, Requests: 9, Period: time.Hour}}}})
		_, _ = idem.Begin(context.Background(), "tenant-7", "secret-key", idempotency.Fingerprint{}, idempotency.TTLs{})
		got := spans.GetSpans()
		if len(got) != 2 {
			t.Fatalf("%v: %d spans, want 2", c.err, len(got))
		}
		for _, s := range got {
			attrs := map[string]string{}
			for _, kv := range s.Attributes {
				attrs[string(kv.Key)] = kv.Value.String()
				if strings.Contains(kv.Value.String(), "secret") || strings.Contains(kv.Value.String(), "tenant-7") {
					t.Errorf("%s: %s = %q holds the key", s.Name, kv.Key, kv.Value.String())
				}
			}
			if s.Status.Code.String() != "Error" || attrs["error.type"] != c.want || attrs["db.system.name"] != "redis" {
				t.Errorf("%v: %s status %v, attributes %v; want Error, error.type %s, db.system.name redis", c.err, s.Name, s.Status, attrs, c.want)
			}
			if s.Name == SpanAllowBatch && attrs["extauthz.algorithm"] != "mixed" {
				t.Errorf("gcra + fixed_window: extauthz.algorithm = %q, want mixed", attrs["extauthz.algorithm"])
			}
		}
	}
}
