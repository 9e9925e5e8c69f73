package authz

import (
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	lockoutredis "github.com/extauthz/extauthz/pkg/ratelimit/lockout/redisstore"
	"github.com/extauthz/extauthz/pkg/ratelimit/redisstore"
)

// chargeRedisPolicy has hour-long windows: Redis's own clock runs during
// the test, and no window may turn over in it.
const chargeRedisPolicy = `
http:
  identity:
    sources: [{tenant_header: x-tenant-id}]
  routes:
    - name: login
      path_prefix: /login
      rate_limits:
        - name: login-per-address
          requests_per_unit: 5
          unit: hour
          algorithm: fixed_window
          charge:
            on_status: [401]
            key: {client_address: {}}
            lockout: {initial: 1h}
    - name: chat
      path_prefix: /v1/chat
      rate_limits:
        - {name: tokens, requests_per_unit: 1000, unit: hour, algorithm: fixed_window, charge: {cost: {json_field: usage.total_tokens, default: 0}}}
`

// sentinelClient is the client the service builds for a master found
// through sentinels (redisclient.New, a failover client).
func sentinelClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	sn := redistest.NewSentinel(t)
	// Deadlines a loaded machine meets (the service's 50 ms default is for
	// production): these tests are of what is decided, not of timing.
	c, err := redisclient.New(redisclient.Options{URL: "redis://:" + redistest.SentinelDataPassword + "@/0",
		SentinelAddrs: sn.Addrs, SentinelMaster: redistest.SentinelMaster, SentinelPassword: redistest.SentinelPassword,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Two replicas on one Redis (standalone, cluster, or found through
// Sentinel) share the budgets exactly: requests checked by
// one and charged by the other's ext_proc are one budget; a lockout one
// replica trips refuses the key on the other.
func TestChargeTwoReplicasShareExactly(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster", "sentinel"} {
		t.Run(kind, func(t *testing.T) {
			var client redisstore.Client
			var lc lockoutredis.Processor
			switch kind {
			case "cluster":
				c := redistest.NewCluster(t).Client()
				client, lc = c, c
			case "sentinel":
				c := sentinelClient(t)
				client, lc = c, c
			default:
				c := redistest.Standalone(t).Client()
				client, lc = c, c
			}
			limits, err := redisstore.New(client, redisstore.Options{Prefix: "c31"})
			if err != nil {
				t.Fatal(err)
			}
			lo, err := lockoutredis.New(lc, lockoutredis.Options{Prefix: "c31"})
			if err != nil {
				t.Fatal(err)
			}
			clock := testclock.New(envoytest.T0)
			a := startChargeOn(t, chargeRedisPolicy, clock, limits, lo)
			b := startChargeOn(t, chargeRedisPolicy, clock, limits, lo)
			replicas := []*chargeEnv{a, b}

			for i := range 4 { // checked on one replica, charged on the other
				check, charge := replicas[i%2], replicas[(i+1)%2]
				md := chargeAdmitted(t, check.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme")))
				charge.respond(t, md, 200, []byte(`{"usage":{"total_tokens":300}}`))
			}
			for _, r := range replicas {
				wantDenied(t, r.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme")), 429, ProblemQuotaExceeded)
			}
			chargeAdmitted(t, b.check(t, checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "globex")))

			for i := range 5 {
				r := replicas[i%2]
				md := chargeAdmitted(t, r.check(t, checkFrom("198.51.100.1", "POST", "/login", nil)))
				replicas[(i+1)%2].respond(t, md, 401, nil)
			}
			for _, r := range replicas {
				wantDenied(t, r.check(t, checkFrom("198.51.100.1", "POST", "/login", nil)), 429, ProblemLockedOut)
			}
			chargeAdmitted(t, a.check(t, checkFrom("198.51.100.2", "POST", "/login", nil)))
		})
	}
}

// redisReplicas starts two replicas sharing one Redis of kind (standalone,
// cluster, or found through Sentinel), their checks and charges on it.
func redisReplicas(t *testing.T, kind, yaml string) []*chargeEnv {
	t.Helper()
	var client redisstore.Client
	var lc lockoutredis.Processor
	switch kind {
	case "cluster":
		c := redistest.NewCluster(t).Client()
		client, lc = c, c
	case "sentinel":
		c := sentinelClient(t)
		client, lc = c, c
	default:
		c := redistest.Standalone(t).Client()
		client, lc = c, c
	}
	limits, err := redisstore.New(client, redisstore.Options{Prefix: "c36"})
	if err != nil {
		t.Fatal(err)
	}
	lo, err := lockoutredis.New(lc, lockoutredis.Options{Prefix: "c36"})
	if err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(envoytest.T0)
	return []*chargeEnv{startChargeOn(t, yaml, clock, limits, lo), startChargeOn(t, yaml, clock, limits, lo)}
}

// Issue 36 across two replicas on Redis: 20 reservations of 300 at once
// with 400 left admit exactly 2, and 30 parallel guesses from one address
// against a limit of 5 let at most 5 through.
func TestChargeTwoReplicasReserveAtomically(t *testing.T) {
	// Redis's own clock runs: hour-long windows never turn over in the test.
	yaml := strings.ReplaceAll(atomicPolicy, "unit: minute", "unit: hour")
	for _, kind := range []string{"standalone", "cluster", "sentinel"} {
		t.Run(kind, func(t *testing.T) {
			replicas := redisReplicas(t, kind, yaml)
			admitConcurrentReservations(t, replicas)
			var wg sync.WaitGroup
			in := make([][]*authv3.CheckResponse, 2)
			for i, r := range replicas {
				reqs := make([]*authv3.CheckRequest, 15)
				for j := range reqs {
					reqs[j] = checkFrom("198.51.100.9", "POST", "/login", nil)
				}
				wg.Go(func() { in[i] = admittedOnes(r.checkAll(t, reqs)) })
			}
			wg.Wait()
			if n := len(in[0]) + len(in[1]); n > 5 {
				t.Errorf("%d of 30 parallel guesses over two replicas reached the upstream, limit 5", n)
			}
		})
	}
}
