package main

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

// exerciseRLQS opens an RLQS stream on the process and reports one bucket
// of examples/policy's edge domain: the served binary answers with the
// rule's whole limit as a token bucket (one client), and the per-rule RLQS
// series exist afterwards.
func exerciseRLQS(t *testing.T, p *proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(p.dial(t)).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatalf("StreamRateLimitQuotas: %v", err)
	}
	bucket := map[string]string{"no_api_key": "true", "remote_address": "10.0.0.1"} // 50/s
	err = stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqspb.BucketId{Bucket: bucket}, NumRequestsAllowed: 1,
	}}})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb.GetTokensPerFill().GetValue() != 3000 || tb.GetFillInterval().AsDuration() != time.Minute || tb.GetMaxTokens() != 50 {
		t.Fatalf("assignment %v, want 3000 tokens per minute (50/s), burst 50", resp)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}
