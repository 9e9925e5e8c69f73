package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/xdstest"
)

// aiBackend is the AIServiceBackend of AI Gateway's quota e2e test
// (tests/e2e/testdata/backend_quota_ratelimit.yaml), as its translator
// names it.
const aiBackend = "default/envoy-ai-gateway-quota-ratelimit-testupstream"

// quotaCall is one call of Envoy's quota filter: the descriptor of a model
// with hits (the request's 1, a stream-done cost, 0 a check; negative, a
// refund). It returns the overall code and the status.
func quotaCall(t *testing.T, client rlsv3.RateLimitServiceClient, model string, hits int64) (rlsv3.RateLimitResponse_Code, *rlsv3.RateLimitResponse_DescriptorStatus) {
	t.Helper()
	d := &commonrlv3.RateLimitDescriptor{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
		{Key: xdstest.AIGatewayBackendKey, Value: aiBackend}, {Key: xdstest.AIGatewayModelKey, Value: model}}}
	if hits < 0 {
		d.IsNegativeHits, hits = true, -hits
	}
	d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: xdstest.AIGatewayQuotaDomain, Descriptors: []*commonrlv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %d): %v", model, hits, err)
	}
	return resp.GetOverallCode(), resp.GetStatuses()[0]
}

// TestBinaryServesAIGatewaysQuotaRole: started as AI Gateway starts its
// QuotaPolicy rate-limit deployment (envoyproxy/ratelimit's image, limits
// over xDS from its controller for the node envoy-ai-gateway-ratelimit),
// extauthz takes a snapshot shaped like its translator's (quota_mode
// per-model descriptors under the backend) and counts as the peer does:
// AI Gateway's own e2e sequence (a limit of 10 per hour, a request, a
// reply of 20 tokens charged at stream done, the next request 429), the
// issue's (a check, a 10,000-token reply, the next check: OK OVER_LIMIT
// OVER_LIMIT), a refund (charge 8, refund 5, charge 6 fits), in fixed
// windows (the reset is the top of the hour, not a token's refill).
func TestBinaryServesAIGatewaysQuotaRole(t *testing.T) {
	x := xdstest.Start(t, "127.0.0.1:0", nil)
	x.Set(t, xdstest.AIGatewayNodeID, "1", xdstest.AIGatewayQuota(aiBackend,
		map[string]uint32{"quota-test-model": 10, "check-model": 10, "refund-model": 10, "window-model": 10}, rlsconfv3.RateLimitUnit_HOUR))
	ratelimit := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary(t), ratelimit); err != nil {
		t.Fatal(err)
	}
	// AI Gateway's Deployment (tests/e2e/testdata/backend_quota_ratelimit.yaml):
	// its argument (which the peer ignores) and environment, the xDS server
	// and Redis here, the ports free ones (ours win over GRPC_PORT).
	cmd := exec.Command(ratelimit, "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system")
	cmd.Env = append(os.Environ(), "EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0", "EXTAUTHZ_SHUTDOWN_TIMEOUT=5s",
		"LOG_LEVEL=debug", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redistest.Standalone(t).Addr, "RUNTIME_ROOT=/data",
		"RUNTIME_SUBDIRECTORY=ratelimit", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_NODE_ID="+xdstest.AIGatewayNodeID, "CONFIG_GRPC_XDS_SERVER_URL="+x.Addr, "GRPC_PORT=8081")
	p := startCmd(t, cmd)
	eventually(t, "snapshot 1 ACKed", func() bool { return x.Acked("1") })
	if logs := p.Logs(); !strings.Contains(logs, `arguments [\"--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system\"] are ignored`) {
		t.Errorf("want one warning naming the ignored argument:\n%s", logs)
	}
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	// The steps must share one hour's window (a new one starts afresh).
	if left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour)); left < 10*time.Second {
		time.Sleep(left + 100*time.Millisecond)
	}

	sequence := func(model string, hits ...int64) []rlsv3.RateLimitResponse_Code {
		var got []rlsv3.RateLimitResponse_Code
		for _, h := range hits {
			code, _ := quotaCall(t, client, model, h)
			got = append(got, code)
		}
		return got
	}
	if got, want := sequence("quota-test-model", 1, 20, 1), []rlsv3.RateLimitResponse_Code{ok, over, over}; !slices.Equal(got, want) {
		t.Errorf("AI Gateway's e2e (request, 20 tokens at stream done, next request): %v, want %v\n%s", got, want, p.Logs())
	}
	if _, st := quotaCall(t, client, "quota-test-model", 0); st.GetLimitRemaining() != 0 || st.GetCode() != over {
		t.Errorf("after 1+20+1 of 10: %v, want OVER_LIMIT: every charge landed, the refused one too", st)
	}
	if got, want := sequence("check-model", 0, 10_000, 0), []rlsv3.RateLimitResponse_Code{ok, over, over}; !slices.Equal(got, want) {
		t.Errorf("check, 10,000 at stream done, check: %v, want %v", got, want)
	}
	if got, want := sequence("refund-model", 8, -5, 6), []rlsv3.RateLimitResponse_Code{ok, ok, ok}; !slices.Equal(got, want) {
		t.Errorf("charge 8, refund 5, charge 6 of 10: %v, want %v", got, want)
	}
	now := time.Now()
	_, st := quotaCall(t, client, "window-model", 1)
	toTheHour := now.Truncate(time.Hour).Add(time.Hour).Sub(now)
	if reset := st.GetDurationUntilReset().AsDuration(); st.GetLimitRemaining() != 9 || reset > toTheHour+time.Second || reset < toTheHour-3*time.Second {
		t.Errorf("1 of 10/hour: remaining %d, reset in %s; want 9 and the end of the hour's window, %s away (fixed windows, as the peer)",
			st.GetLimitRemaining(), reset, toTheHour)
	}
}
