package authz

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// Two replicas on one Redis: the slots replica a's ext_authz takes are
// counted for both, and replica b's ext_proc, which sees the stream,
// releases one (the next request on a is admitted). A cancelled stream
// releases too: the slot set is empty at the end.
func TestMaxInFlightOverRedisAcrossReplicas(t *testing.T) {
	c := redistest.Standalone(t).Client()
	rs, err := redisstore.New(c, redisstore.Options{Prefix: "grpc"})
	if err != nil {
		t.Fatal(err)
	}
	// A generous bound: this test shares a 2-core machine with others.
	a := startIdemStore(t, inFlightPolicy, nil, WithInFlight(rs), WithStoreTimeout(5*time.Second))
	b := startIdemStore(t, inFlightPolicy, nil, WithInFlight(rs), WithStoreTimeout(5*time.Second))

	first := wantSlot(t, a.get(t, "/reports/1", "acme"))
	second := wantSlot(t, b.get(t, "/reports/2", "acme"))
	wantTooMany(t, a.get(t, "/reports/3", "acme"), `"reports-in-flight";q=2;qu="concurrent-requests"`)
	wantSlot(t, b.get(t, "/reports/3", "globex")) // another caller's own slots

	b.openWith(t, first).upstream(200, []byte("done"), viaUpstream, 0)
	if got := b.inFlight(t, envoy.APIExtProc, envoy.InFlightReleased); got != 1 {
		t.Fatalf("replica b released %v slots, want 1", got)
	}
	third := wantSlot(t, a.get(t, "/reports/4", "acme"))
	wantTooMany(t, a.get(t, "/reports/5", "acme"), `"reports-in-flight";q=2;qu="concurrent-requests"`)

	held := func() int64 {
		return c.ZCard(t.Context(), rs.Key(inFlightKey("acme", &policy.Route{Name: "reports"}))).Val()
	}
	if n := held(); n != 2 {
		t.Fatalf("%d slots in Redis for acme, want 2", n)
	}
	for _, md := range []*corev3.Metadata{second, third} {
		_, cancel := a.openCancel(t, md)
		cancel()
	}
	a.waitReleased(t, 2)
	if n := held(); n != 0 {
		t.Errorf("%d slots left in Redis for acme, want 0", n)
	}
}
