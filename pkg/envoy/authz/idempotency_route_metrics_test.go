package authz

import (
	"context"
	"sync/atomic"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
)

const routeEventsMetric = "extauthz_idempotency_route_events_total"

// routeSeries lists the route label values of the per-route metric that
// exist in reg (at any value, 0 included).
func routeSeries(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != routeEventsMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "route" {
					out[lp.GetValue()] = true
				}
			}
		}
	}
	return out
}

func routeEvent(t *testing.T, reg *prometheus.Registry, api, route string, e idempotency.Event) float64 {
	t.Helper()
	return envoytest.CounterValue(t, reg, routeEventsMetric, map[string]string{"api": api, "route": route, "event": string(e)})
}

func wantRouteSeries(t *testing.T, reg *prometheus.Registry, want ...string) {
	t.Helper()
	got := routeSeries(t, reg)
	for _, r := range want {
		if !got[r] {
			t.Errorf("no series for route %q (have %v)", r, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series for routes %v, want exactly %v", got, want)
	}
}

// Each event is counted under the route the policy matched, through both
// APIs and both wirings, and in the per-API total as before.
func TestIdempotencyEventsCountedPerRoute(t *testing.T) {
	e := startIdem(t, idemPolicy)
	// From the start: every idempotent route of the policy.
	wantRouteSeries(t, e.reg, "strict", "orders", "optional", "limited")

	wantDenied(t, e.post(t, "/strict/1", "acme", "", []byte("{}")), 400, ProblemKeyMissing)
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	s.upstream(201, []byte(`{"id":1}`), "via_upstream", 0)
	s, ir := e.postA(t, "/optional/1", "acme", "k2", []byte("{}"))
	if ir != nil {
		t.Fatalf("wiring (a) answered %v, want upstream", ir)
	}
	s.upstream(201, []byte(`{}`), "via_upstream", 0)

	for _, c := range []struct {
		api, route string
		ev         idempotency.Event
		want       float64
	}{
		{envoy.APIExtAuthz, "strict", idempotency.EventMissing, 1},
		{envoy.APIExtAuthz, "orders", idempotency.EventMissing, 0},
		{envoy.APIExtAuthz, "orders", idempotency.EventAcquired, 1},
		{envoy.APIExtAuthz, "strict", idempotency.EventAcquired, 0},
		{envoy.APIExtProc, "orders", idempotency.EventStored, 1},
		{envoy.APIExtProc, "optional", idempotency.EventAcquired, 1},
		{envoy.APIExtProc, "optional", idempotency.EventStored, 1},
		{envoy.APIExtProc, "orders", idempotency.EventAcquired, 0},
	} {
		if got := routeEvent(t, e.reg, c.api, c.route, c.ev); got != c.want {
			t.Errorf("%s %s %s = %v, want %v", c.api, c.route, c.ev, got, c.want)
		}
	}
	if got := e.event(envoy.APIExtProc, idempotency.EventStored); got != 2 {
		t.Errorf("per-API stored = %v, want 2 (both routes)", got)
	}
	wantRouteSeries(t, e.reg, "strict", "orders", "optional", "limited")
}

// A handoff naming a route the policy does not have (removed by a reload,
// or metadata not written by our ext_authz) is counted under UnknownRoute:
// the label never takes a name the policy does not define.
func TestIdempotencyEventsOfUnknownRoute(t *testing.T) {
	e := startIdem(t, idemPolicy)
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k", []byte("{}")), envoy.ActionLease)
	f := md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataField].GetStructValue().GetFields()
	f[mdRoute] = structpb.NewStringValue("not-in-policy")

	s := e.open(t)
	s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, md, ":method", "POST", ":path", "/orders/1"))
	s.upstream(201, []byte(`{}`), "via_upstream", 0)
	// No settings to judge by: the reply ran, so it is not kept.
	if got := routeEvent(t, e.reg, envoy.APIExtProc, UnknownRoute, idempotency.EventNotKept); got != 1 {
		t.Errorf("not_kept under %s = %v, want 1", UnknownRoute, got)
	}
	wantRouteSeries(t, e.reg, "strict", "orders", "optional", "limited", UnknownRoute)
}

// Past MaxRouteSeries distinct routes, later routes share OverflowRule;
// UnknownRoute is outside the cap. A negative cap turns the metric off.
func TestIdempotencyRouteEventsOverflow(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewIdempotencyMetricsWith(reg, IdempotencyMetricsOptions{MaxRouteSeries: 2})
	if err != nil {
		t.Fatal(err)
	}
	m.syncRoutes(envoytest.WritePolicy(t, idemPolicy).HTTP) // strict, orders; optional and limited overflow
	wantRouteSeries(t, reg, "strict", "orders", envoy.OverflowRule)
	m.Count(envoy.APIExtAuthz, "optional", idempotency.EventAcquired)
	m.Count(envoy.APIExtAuthz, "later", idempotency.EventAcquired)
	m.Count(envoy.APIExtAuthz, "", idempotency.EventAcquired)
	m.Count(envoy.APIExtAuthz, "orders", idempotency.EventAcquired)
	for route, want := range map[string]float64{envoy.OverflowRule: 2, UnknownRoute: 1, "orders": 1, "strict": 0} {
		if got := routeEvent(t, reg, envoy.APIExtAuthz, route, idempotency.EventAcquired); got != want {
			t.Errorf("acquired on %s = %v, want %v", route, got, want)
		}
	}
	wantRouteSeries(t, reg, "strict", "orders", envoy.OverflowRule, UnknownRoute)

	off := prometheus.NewRegistry()
	m, err = NewIdempotencyMetricsWith(off, IdempotencyMetricsOptions{MaxRouteSeries: -1})
	if err != nil {
		t.Fatal(err)
	}
	m.syncRoutes(envoytest.WritePolicy(t, idemPolicy).HTTP)
	m.Count(envoy.APIExtAuthz, "orders", idempotency.EventAcquired)
	wantRouteSeries(t, off)
	if m.Value(envoy.APIExtAuthz, idempotency.EventAcquired) != 1 {
		t.Error("the per-API metric stopped counting with the per-route one off")
	}
}

// swappablePolicy is a PolicySource a test reloads.
type swappablePolicy struct{ p atomic.Pointer[policy.Policy] }

func (s *swappablePolicy) Current() *policy.Policy { return s.p.Load() }

// After a reload, the first call creates the series of added routes; the
// series of removed routes stay with their counts. Routes without
// idempotency settings have none.
func TestIdempotencyRouteSeriesFollowReloads(t *testing.T) {
	const before = `
http:
  tenant: {header: x-tenant-id}
  routes:
    - {name: orders, path_prefix: /orders, idempotency: {}}
    - {name: reads, path_prefix: /reads}
`
	const after = `
http:
  tenant: {header: x-tenant-id}
  routes:
    - {name: refunds, path_prefix: /refunds, idempotency: {}}
`
	src := &swappablePolicy{}
	src.p.Store(envoytest.WritePolicy(t, before))
	reg := prometheus.NewRegistry()
	m, err := envoy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	events, err := NewIdempotencyMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	clk := testclock.New(envoytest.T0)
	az, err := NewAuthz(envoytest.NewTestStore(t, clk.Now), memstore.New(memstore.Config{Now: clk.Now}), src, m, events)
	if err != nil {
		t.Fatal(err)
	}
	wantRouteSeries(t, reg, "orders")
	if _, err := az.Check(context.Background(), checkReq("POST", "/orders/1", nil, "x-tenant-id", "acme", "idempotency-key", "k")); err != nil {
		t.Fatal(err)
	}
	src.p.Store(envoytest.WritePolicy(t, after))
	wantRouteSeries(t, reg, "orders") // nothing asked yet
	if _, err := az.Check(context.Background(), checkReq("GET", "/elsewhere", nil)); err != nil {
		t.Fatal(err)
	}
	wantRouteSeries(t, reg, "orders", "refunds")
	if got := routeEvent(t, reg, envoy.APIExtAuthz, "orders", idempotency.EventAcquired); got != 1 {
		t.Errorf("acquired on the removed route = %v, want 1 (kept)", got)
	}
}
