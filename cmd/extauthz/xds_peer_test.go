package main

import (
	"context"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/extauthz/extauthz/internal/xdstest"
)

// peerLimit is a one-level descriptor as envoyproxy/ratelimit's own xDS
// integration test (test/integration/xds_sotw_integration_test.go) writes them.
func peerLimit(key string, rpu uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitDescriptor {
	return &rlsconfv3.RateLimitDescriptor{Key: key, RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: rpu}}
}

// peerSnapshot is that test's initial snapshot ("1"), plus its "reload"
// domain when withReload (snapshot "2").
func peerSnapshot(withReload bool) []*rlsconfv3.RateLimitConfig {
	s, m, h, d := rlsconfv3.RateLimitUnit_SECOND, rlsconfv3.RateLimitUnit_MINUTE, rlsconfv3.RateLimitUnit_HOUR, rlsconfv3.RateLimitUnit_DAY
	out := []*rlsconfv3.RateLimitConfig{
		{Name: "basic", Domain: "basic", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			peerLimit("key1", 50, s), peerLimit("key1_local", 50, s), peerLimit("one_per_minute", 1, m)}},
		{Name: "another", Domain: "another", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			peerLimit("key2", 20, m), peerLimit("key3", 10, h), peerLimit("key2_local", 20, m),
			peerLimit("key3_local", 10, h), peerLimit("key4", 20, d), peerLimit("key4_local", 20, d)}},
	}
	if withReload {
		out = append(out, &rlsconfv3.RateLimitConfig{Name: "reload", Domain: "reload", Descriptors: []*rlsconfv3.RateLimitDescriptor{
			peerLimit("key1", 50, s), peerLimit("block", 0, s), peerLimit("one_per_minute", 1, m)}})
	}
	return out
}

// TestBinaryAnswersThePeersXDSSnapshots replays envoyproxy/ratelimit's
// xDS config-reload integration test: the same snapshots, the same calls,
// the same answers (its testConfigReload, plus the block and one-per-minute
// rules the snapshot carries).
func TestBinaryAnswersThePeersXDSSnapshots(t *testing.T) {
	x := xdstest.Start(t, "127.0.0.1:0", nil)
	x.Set(t, xdsNode, "1", peerSnapshot(false)...)
	p := start(t, xdsEnv(x.Addr)...)
	eventually(t, "ready", func() bool { code, _ := p.get(t, "/readyz"); return code == 200 })
	client := rlsv3.NewRateLimitServiceClient(p.dial(t))
	ask := func(domain, key string) *rlsv3.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1, Descriptors: []*commonrlv3.RateLimitDescriptor{{
			Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: key, Value: "foo"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s, %s): %v", domain, key, err)
		}
		return resp
	}
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		rpu       uint32 // 0: no current_limit
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		remaining uint32
	}
	check := func(what string, resp *rlsv3.RateLimitResponse, w want) {
		t.Helper()
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != w.code || st.GetCode() != w.code || st.GetCurrentLimit().GetRequestsPerUnit() != w.rpu ||
			st.GetCurrentLimit().GetUnit() != w.unit || st.GetLimitRemaining() != w.remaining {
			t.Errorf("%s: %v, want %+v", what, resp, w)
		}
	}

	check("snapshot 1, reload/block", ask("reload", "block"), want{code: rlsv3.RateLimitResponse_OK})
	check("snapshot 1, basic/key1", ask("basic", "key1"), want{rlsv3.RateLimitResponse_OK, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49})

	x.Set(t, xdsNode, "2", peerSnapshot(true)...)
	eventually(t, "snapshot 2 acked", func() bool { return x.Acked("2") })
	check("snapshot 2, reload/key1", ask("reload", "key1"), want{rlsv3.RateLimitResponse_OK, 50, rlsv3.RateLimitResponse_RateLimit_SECOND, 49})
	check("snapshot 2, reload/block", ask("reload", "block"), want{rlsv3.RateLimitResponse_OVER_LIMIT, 0, rlsv3.RateLimitResponse_RateLimit_SECOND, 0})
	check("snapshot 2, reload/one_per_minute #1", ask("reload", "one_per_minute"), want{rlsv3.RateLimitResponse_OK, 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0})
	check("snapshot 2, reload/one_per_minute #2", ask("reload", "one_per_minute"), want{rlsv3.RateLimitResponse_OVER_LIMIT, 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0})

	x.Set(t, xdsNode, "3", peerSnapshot(false)...)
	eventually(t, "snapshot 3 acked", func() bool { return x.Acked("3") })
	check("snapshot 3, reload/key1", ask("reload", "key1"), want{code: rlsv3.RateLimitResponse_OK})
}
