package e2e

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyRLQSBehaviour pins what the Envoy binary does with RLQS
// assignments, the facts extauthz's RLQS server and quota.BucketFor are
// built on (docs/rlqs.md, "What Envoy 1.40 does and does not enforce"). A
// stub RLQS server answers each tenant's bucket with a fixed strategy (or
// one at the first report and another after);
// envoy/rlqs.yaml runs with reporting_interval 1s and
// expired_assignment_behavior reuse_last_assignment. When Envoy is
// upgraded and this fails, the assumption it names has changed.
func TestEnvoyRLQSBehaviour(t *testing.T) {
	t.Parallel()
	stub := startRLQSStub(t, map[string]stubAnswer{
		"truncated": {strategy: tokenBucket(7, 1500*time.Millisecond, 7), ttl: time.Minute},
		"slow":      {strategy: tokenBucket(30, time.Minute, 1), ttl: time.Minute},
		"expiring":  {strategy: tokenBucket(2, time.Second, 2), ttl: 2 * time.Second, once: true},
		"denied":    {strategy: denyAll, ttl: time.Minute},
		// At the second report (5 s) a token bucket of burst 30 replaces
		// a blanket rule, or a token bucket of burst 10.
		"fromdeny": {strategy: denyAll, then: tokenBucket(600, time.Minute, 30), ttl: time.Minute},
		"changed":  {strategy: tokenBucket(600, time.Minute, 10), then: tokenBucket(600, time.Minute, 30), ttl: time.Minute},
	})
	s := newStack(t, stackOpts{config: "rlqs.yaml", noExtauthz: true, edit: func(src []byte) []byte {
		out := strings.Replace(string(src), "reporting_interval: 5s", "reporting_interval: 1s", 1)
		return []byte(strings.Replace(out, "expired_assignment_behavior:\n                            fallback_rate_limit: {blanket_rule: ALLOW_ALL}",
			"expired_assignment_behavior:\n                            reuse_last_assignment: {}", 1))
	}})
	e := s.launchEnvoy("envoy-stub", []string{stub.addr})
	var loads []*offered
	for _, tenant := range []string{"truncated", "slow", "expiring", "denied", "fromdeny", "changed"} {
		loads = append(loads, &offered{name: tenant, url: e.url, rps: 20, tenant: tenant})
	}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Go(func() { l.run(ctx) })
	}
	sleepUntil(start.Add(9 * time.Second))
	cancel()
	wg.Wait()
	from, to := start.Add(2*time.Second), start.Add(9*time.Second)
	rate := func(l *offered) float64 { ok, _ := l.count(from, to); return float64(ok) / to.Sub(from).Seconds() }
	for _, l := range loads {
		ok, denied := l.count(from, to)
		t.Logf("%s: %d admitted, %d denied from 2 s to 9 s", l.name, ok, denied)
	}

	if r := rate(loads[0]); r < 6 || r > 8 {
		t.Errorf("7 tokens per 1500ms admitted %.1f/s: want 7/s, the interval truncated to 1s (else 4.7/s)", r)
	}
	if r := rate(loads[1]); r < 0.25 || r > 1 {
		t.Errorf("30 tokens per 60s (max 1) admitted %.2f/s: want 0.5/s, refilled continuously", r)
	}
	if ok, denied := loads[2].count(start.Add(4*time.Second), to); denied > 0 {
		t.Logf("reuse_last_assignment is honoured now (%d admitted, %d denied after the 2s TTL): envoy/rlqs.yaml could use it", ok, denied)
	} else if ok == 0 {
		t.Errorf("an expired assignment: nothing admitted")
	}
	if ok, denied := loads[3].count(from, to); ok > 0 || denied == 0 {
		t.Errorf("DENY_ALL: %d admitted, %d denied; want all denied", ok, denied)
	}
	if gaps := stub.reportGaps("truncated"); len(gaps) == 0 || gaps[0] < 4*time.Second {
		t.Errorf("reports with reporting_interval 1s came %v apart, want Envoy 1.40's fixed 5s", gaps)
	}
	checkDenyResponse(t, loads[3])
	checkBurstOnReplace(t, start, loads[4], loads[5])
}

// checkBurstOnReplace: a token bucket that replaces a blanket rule starts
// full (max_tokens at once); one that replaces a token bucket does not,
// though Envoy builds a new one when any field differs. Counted from 5.5 s
// (the second report, at 5 s, installs them) to 9 s at 20 requests/s and
// 10 tokens/s: full, 30 + 35 = 65; not, about 35.
func checkBurstOnReplace(t *testing.T, start time.Time, fromDeny, changed *offered) {
	t.Helper()
	from, to := start.Add(5500*time.Millisecond), start.Add(9*time.Second)
	for _, l := range []*offered{fromDeny, changed} {
		ok, denied := l.count(from, to)
		t.Logf("%s: %d admitted, %d denied from 5.5 s to 9 s", l.name, ok, denied)
	}
	if ok, _ := fromDeny.count(from, to); ok < 50 {
		t.Errorf("a token bucket (max 30, 10/s) after DENY_ALL: %d admitted in 3.5 s, want about 65: it starts full", ok)
	}
	if ok, _ := changed.count(from, to); ok > 50 {
		t.Errorf("a token bucket (max 30, 10/s) replacing one of max 10: %d admitted in 3.5 s, want about 35: it keeps the tokens the old one had", ok)
	}
}

var denyAll = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}

type stubAnswer struct {
	strategy *typev3.RateLimitStrategy
	ttl      time.Duration
	once     bool                      // answer only the bucket's first report
	then     *typev3.RateLimitStrategy // when set, the answer from the bucket's second report on
}

// rlqsStub is an RLQS server that answers each bucket by its tenant and
// records when each tenant's bucket was reported.
type rlqsStub struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	addr    string
	answers map[string]stubAnswer

	mu      sync.Mutex
	reports map[string][]time.Time
}

func startRLQSStub(t *testing.T, answers map[string]stubAnswer) *rlqsStub {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stub := &rlqsStub{addr: l.Addr().String(), answers: answers, reports: map[string][]time.Time{}}
	g := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(g, stub)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return stub
}

func (s *rlqsStub) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			return nil
		}
		var actions []*rlqspb.RateLimitQuotaResponse_BucketAction
		for _, u := range m.GetBucketQuotaUsages() {
			tenant := u.GetBucketId().GetBucket()["tenant"]
			s.mu.Lock()
			s.reports[tenant] = append(s.reports[tenant], time.Now())
			n := len(s.reports[tenant])
			s.mu.Unlock()
			a, ok := s.answers[tenant]
			if !ok || (a.once && n > 1) {
				continue
			}
			strategy := a.strategy
			if a.then != nil && n > 1 {
				strategy = a.then
			}
			actions = append(actions, &rlqspb.RateLimitQuotaResponse_BucketAction{
				BucketId: u.GetBucketId(),
				BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
					QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
						AssignmentTimeToLive: durationpb.New(a.ttl), RateLimitStrategy: strategy,
					},
				},
			})
		}
		if len(actions) > 0 {
			if err := stream.Send(&rlqspb.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
				return err
			}
		}
	}
}

// reportGaps returns the times between a tenant's reports.
func (s *rlqsStub) reportGaps(tenant string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	r := s.reports[tenant]
	for i := 1; i < len(r); i++ {
		out = append(out, r[i].Sub(r[i-1]))
	}
	return out
}

func tokenBucket(tokens uint32, interval time.Duration, maxTokens uint32) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(tokens), FillInterval: durationpb.New(interval),
	}}}
}
