package authz

import (
	"context"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/policy"
)

// TestExplainShowsChargedLimits: explain lists a login route's charged
// limits with what each counts and whose key: the address's budget read
// without a charge (twice, unchanged), the account's without a key (it
// comes from the body, which explain is not given); after five failed
// logins it shows the budget spent and the address locked out, and
// foretells Check's 429.
func TestExplainShowsChargedLimits(t *testing.T) {
	e := startCharge(t, chargePolicy)
	hr := HTTPRequest{Method: "POST", Path: "/login", SourceAddress: "198.51.100.1:40000"}
	explain := func() Explanation {
		t.Helper()
		ex, err := e.az.Explain(context.Background(), hr)
		if err != nil {
			t.Fatal(err)
		}
		if len(ex.Charged) != 2 {
			t.Fatalf("charged %+v, want the route's two charged limits", ex.Charged)
		}
		return ex
	}
	for range 2 {
		ex := explain()
		addr, account := ex.Charged[0], ex.Charged[1]
		if addr.Limit.Limit.Name != "login-per-address" || addr.Limit.Charge.Key.Kind != policy.ChargeKeyClientAddress ||
			len(addr.Limit.Charge.OnStatus) != 2 || addr.Limit.Charge.Lockout == nil {
			t.Fatalf("address limit %+v", addr.Limit)
		}
		if addr.Key == "" || addr.Result.Remaining != 5 || addr.LockedFor != 0 || !ex.Allowed {
			t.Fatalf("fresh address: key %q remaining %d locked %v allowed %v; want a key, 5 left, not locked, admitted",
				addr.Key, addr.Result.Remaining, addr.LockedFor, ex.Allowed)
		}
		if account.Limit.Charge.Key.Kind != policy.ChargeKeyJSONField || account.Key != "" || account.Result.Limit != 0 {
			t.Fatalf("account limit without a body: %+v; want no key and no state", account)
		}
	}
	for range 5 {
		e.login(t, "198.51.100.1", "alice", 401)
	}
	ex := explain()
	if addr := ex.Charged[0]; addr.Result.Remaining != 0 || addr.LockedFor != time.Minute || ex.Allowed {
		t.Fatalf("after 5 failures: remaining %d locked %v allowed %v; want 0, 1m, refused", addr.Result.Remaining, addr.LockedFor, ex.Allowed)
	}
	wantDenied(t, e.check(t, checkFrom("198.51.100.1", "POST", "/login", []byte(`{"username":"bob"}`))), 429, ProblemLockedOut)
	if ex := explainFrom(t, e, "198.51.100.2:40000"); !ex.Allowed || ex.Charged[0].Result.Remaining != 5 {
		t.Fatalf("another address: %+v", ex)
	}
}

func explainFrom(t *testing.T, e *chargeEnv, addr string) Explanation {
	t.Helper()
	ex, err := e.az.Explain(context.Background(), HTTPRequest{Method: "POST", Path: "/login", SourceAddress: addr})
	if err != nil {
		t.Fatal(err)
	}
	return ex
}
