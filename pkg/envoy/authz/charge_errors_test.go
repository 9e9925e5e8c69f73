package authz

import (
	"context"
	"errors"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

var errLimitsDown = errors.New("limits down")

// downLockouts fails every call, as a lockout store whose Redis is gone.
type downLockouts struct{ lockout.Store }

func (downLockouts) Locked(context.Context, string) (time.Duration, error) { return 0, errLimitsDown }

// A failing rate-limit store is a store failure on the request path
// (Unavailable to ext_authz, a failed stream to ext_proc alone: Envoy's
// failure mode decides, as for every other limit), never a 429 or a panic.
func TestChargeStoreDown(t *testing.T) {
	t.Parallel()
	clock := testclock.New(envoytest.T0)
	e := startChargeOn(t, chargePolicy, clock, envoytest.FailingStore{Store: envoytest.NewTestStore(t, clock.Now), Err: errLimitsDown},
		lockoutmem.New(lockoutmem.Config{Now: clock.Now}))
	_, err := e.authz.Check(context.Background(), checkFrom("192.0.2.1", "POST", "/v1/chat", nil, "x-tenant-id", "acme"))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ext_authz: %v, want Unavailable", err)
	}
	if got := e.counter(t, "extauthz_charge_checks_total", map[string]string{"route": "chat", "limit": "tokens", "outcome": ChargeCheckError}); got != 1 {
		t.Errorf("check errors %v, want 1", got)
	}
	s := e.open(t)
	if err := s.c.Send(reqHeaders(filterv3.ProcessingMode_NONE, true, nil, ":method", "POST", ":path", "/v1/chat", "x-tenant-id", "acme")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("ext_proc alone: %v, want the stream to fail Unavailable", err)
	}
}

// A failing lockout store on a limit with a lockout: Unavailable too.
func TestChargeLockoutStoreDown(t *testing.T) {
	t.Parallel()
	clock := testclock.New(envoytest.T0)
	e := startChargeOn(t, chargePolicy, clock, envoytest.NewTestStore(t, clock.Now), downLockouts{})
	_, err := e.authz.Check(context.Background(), checkFrom("192.0.2.1", "POST", "/login", []byte(`{"username":"a"}`)))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("ext_authz: %v, want Unavailable", err)
	}
}

// Handoff metadata that does not match the policy (a reload renamed the
// limit, a forged or garbled value) charges nothing and fails nothing.
func TestChargeHandoffMismatch(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy)
	entry := func(name string, index, reserved float64, key string) *structpb.Value {
		return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			mdChargeName: structpb.NewStringValue(name), mdChargeIndex: structpb.NewNumberValue(index),
			mdChargeKey: structpb.NewStringValue(key), mdChargeReserved: structpb.NewNumberValue(reserved)}})
	}
	bad := []*structpb.Value{
		entry("renamed", 0, 0, "k"), entry("tokens", 1, 0, "k"), entry("tokens", 0.5, 0, "k"), entry("tokens", -1, 0, "k"),
		entry("tokens", 0, -5, "k"), entry("tokens", 0, 1e18, "k"), entry("tokens", 0, 0, ""), structpb.NewStringValue("junk"),
	}
	for _, v := range bad {
		md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: {Fields: map[string]*structpb.Value{
			MetadataCharge: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				mdChargeRoute:  structpb.NewStringValue("chat"),
				mdChargeLimits: structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}}),
			}}),
		}}}}
		e.respond(t, md, 200, []byte(`{"usage":{"total_tokens":5000}}`))
	}
	for _, md := range []*corev3.Metadata{
		{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: {Fields: map[string]*structpb.Value{MetadataCharge: structpb.NewStringValue("x")}}}},
		{FilterMetadata: map[string]*structpb.Struct{envoy.ExtAuthzNamespace: {Fields: map[string]*structpb.Value{MetadataCharge: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			mdChargeRoute: structpb.NewStringValue("gone")}})}}}},
	} {
		e.respond(t, md, 200, []byte(`{"usage":{"total_tokens":5000}}`))
	}
	if got := e.counter(t, "extauthz_charged_cost_total", map[string]string{"route": "chat", "limit": "tokens"}); got != 0 {
		t.Errorf("charged %v from metadata that matches no limit", got)
	}
}

// A request refused after the check (here: ext_authz's in-flight or
// idempotency answer) never runs, so its reservation is refunded at once.
func TestChargeReservationRefundedWhenNotRun(t *testing.T) {
	t.Parallel()
	e := startCharge(t, chargePolicy+`
    - name: keyed
      path_prefix: /keyed
      idempotency: {key_required: true}
      rate_limits:
        - {name: tokens, requests_per_unit: 1000, unit: minute, charge: {cost: {header: x-usage, default: 0}, reserve: {default: 400}}}
`)
	for range 3 { // no Idempotency-Key: 400, after the check reserved 400
		wantDenied(t, e.check(t, checkFrom("192.0.2.1", "POST", "/keyed", nil, "x-tenant-id", "acme")), 400, ProblemKeyMissing)
	}
	if got := e.counter(t, "extauthz_charge_refunded_total", map[string]string{"route": "keyed", "limit": "tokens"}); got != 1200 {
		t.Errorf("refunded %v, want 1200", got)
	}
	chargeAdmitted(t, e.check(t, checkFrom("192.0.2.1", "POST", "/keyed", nil, "x-tenant-id", "acme", "idempotency-key", `"k1"`)))
}
