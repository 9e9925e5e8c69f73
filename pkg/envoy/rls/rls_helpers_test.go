package rls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/policy"
)

// env is one RLS served on a loopback port, with its client.
type env struct {
	rls     *RLS
	client  rlsv3.RateLimitServiceClient
	store   *envoytest.RecordingStore
	clock   *envoytest.Clock
	reg     *prometheus.Registry
	policy  *policy.Policy
	metrics *envoy.Metrics
}

// startRLS serves an RLS over policyYAML on 127.0.0.1:0 (a real TCP
// listener, not bufconn) and returns a connected client.
func startRLS(t *testing.T, policyYAML string, opts ...Option) *env {
	t.Helper()
	e := &env{clock: testclock.New(envoytest.T0), reg: prometheus.NewRegistry(), policy: envoytest.WritePolicy(t, policyYAML)}
	e.store = &envoytest.RecordingStore{Store: envoytest.NewTestStore(t, e.clock.Now)}
	var err error
	if e.metrics, err = envoy.NewMetrics(e.reg); err != nil {
		t.Fatal(err)
	}
	p := e.policy
	if e.rls, err = NewRLS(e.store, envoy.PolicyFunc(func() *policy.Policy { return p }), e.metrics, opts...); err != nil {
		t.Fatal(err)
	}
	e.client = rlsv3.NewRateLimitServiceClient(envoytest.ServeLoopback(t, e.rls))
	return e
}
