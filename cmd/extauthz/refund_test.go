package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/internal/redistest"
)

// refundPolicy gives every algorithm a limit of 10 per hour, exact and
// (where it can lease) allotment.
const refundPolicy = `domain: refunds
descriptors:
  - {key: k, value: gcra, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra}}
  - {key: k, value: sliding_log, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_log}}
  - {key: k, value: sliding_window, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window}}
  - {key: k, value: fixed_window, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window}}
  - {key: k, value: gcra_allotment, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra, consistency: allotment}}
  - {key: k, value: sliding_window_allotment, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: sliding_window, consistency: allotment}}
  - {key: k, value: fixed_window_allotment, rate_limit: {unit: hour, requests_per_unit: 10, algorithm: fixed_window, consistency: allotment}}
`

// TestRefundsThroughTheStoreStack: a refund (is_negative_hits) through the
// whole store stack (the over-limit cache, allotments, the failure mode,
// Redis standalone and Cluster, and the in-memory store), in each charging
// mode and for every algorithm, exact and allotment: charge 8, then 5 (over
// the 10: refused, and in if_admitted a denial the over-limit cache and
// the allotment slice remember), refund 5, and 5 fit again (a remembered
// denial would refuse them), then 3 do not.
func TestRefundsThroughTheStoreStack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(refundPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	stores := map[string]func(t *testing.T) []string{
		"memory":     func(*testing.T) []string { return nil },
		"standalone": func(t *testing.T) []string { return []string{"EXTAUTHZ_REDIS_URL=" + redistest.Standalone(t).URL} },
		"cluster": func(t *testing.T) []string {
			return []string{"EXTAUTHZ_REDIS_URL=" + redistest.NewCluster(t).URL, "EXTAUTHZ_REDIS_CLUSTER=true"}
		},
	}
	for name, storeEnv := range stores {
		for _, charge := range []string{"if_admitted", "always", "stop_when_over_limit"} {
			t.Run(name+"/"+charge, func(t *testing.T) {
				env := append([]string{"EXTAUTHZ_CONFIG=" + path, "EXTAUTHZ_RLS_CHARGE=" + charge}, patient...)
				p := start(t, append(env, storeEnv(t)...)...)
				client := rlsv3.NewRateLimitServiceClient(p.dial(t))
				for _, value := range []string{"gcra", "sliding_log", "sliding_window", "fixed_window",
					"gcra_allotment", "sliding_window_allotment", "fixed_window_allotment"} {
					var got []string
					for _, hits := range []int64{8, 5, -5, 5, 3} {
						got = append(got, refundCall(t, client, value, hits))
					}
					// The 5 over the limit: refused everywhere; charged
					// (to 13) only where the peer's counting is on, so the
					// refund leaves 8 there and 3 in if_admitted. A
					// sliding_log keeps only the newest 10 hits of a charge
					// past its limit (docs/algorithms.md): 13 become 10.
					want := "OK OVER_LIMIT OK OK OVER_LIMIT"
					if charge != "if_admitted" && value != "sliding_log" {
						want = "OK OVER_LIMIT OK OVER_LIMIT OVER_LIMIT"
					}
					if s := strings.Join(got, " "); s != want {
						t.Errorf("%s: charge 8, 5, refund 5, charge 5, 3 of 10: %s, want %s", value, s, want)
					}
				}
				if name != "memory" {
					noFallbacks(t, []*proc{p})
				}
			})
		}
	}
}

// refundCall sends one descriptor k=value charged hits (negative: a refund).
func refundCall(t *testing.T, client rlsv3.RateLimitServiceClient, value string, hits int64) string {
	t.Helper()
	d := &commonrlv3.RateLimitDescriptor{Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}}
	if hits < 0 {
		d.IsNegativeHits, hits = true, -hits
	}
	d.HitsAddend = wrapperspb.UInt64(uint64(hits))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "refunds", Descriptors: []*commonrlv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("%s %d: %v", value, hits, err)
	}
	return fmt.Sprint(resp.GetOverallCode())
}
