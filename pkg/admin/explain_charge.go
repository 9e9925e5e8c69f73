package admin

import (
	"strconv"
	"strings"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// ChargedLimitState is one charged limit of a route (a limit with
// `charge`): what its check reads and its response charges, whose key, and
// its state, read without charging.
type ChargedLimitState struct {
	// LimitState is the budget as limits[] shows a limit: its key (where
	// it lives) and its state only when the request names the key (else
	// limit and remaining are 0).
	LimitState
	// OnStatus lists the statuses that charge one hit (outcome limits);
	// Cost where a response's cost is read and Reserve what is charged up
	// front (cost limits), as "header NAME", "trailer NAME" or
	// "json_field PATH", with ", default N".
	OnStatus []string `json:"on_status,omitempty"`
	Cost     string   `json:"cost,omitempty"`
	Reserve  string   `json:"reserve,omitempty"`
	// KeySource is whose budget: "caller", "client_address", or "header
	// NAME", "form_field NAME", "json_field PATH" (an account).
	KeySource string `json:"key_source"`
	// Counter is the counting key (and the lockout's); absent when the
	// request does not name it (a key from the body, which explain is not
	// given, or a missing header): the limit does not apply.
	Counter string `json:"counter,omitempty"`
	// Lockout is the limit's lockout, with the key's time left.
	Lockout *LockoutState `json:"lockout,omitempty"`
}

// LockoutState is a charged limit's lockout policy and, for a key, the
// time it stays locked out.
type LockoutState struct {
	InitialSeconds   float64 `json:"initial_seconds"`
	Factor           float64 `json:"factor"`
	MaxSeconds       float64 `json:"max_seconds"`
	ForgetSeconds    float64 `json:"forget_seconds"`
	LockedForSeconds float64 `json:"locked_for_seconds"`
}

// chargedStates renders the charged limits of an explanation and the
// keys where their budgets live.
func (a *API) chargedStates(cs []authz.ChargedState) ([]ChargedLimitState, []string) {
	var out []ChargedLimitState
	var keys []string
	for _, c := range cs {
		l, ch := c.Limit.Limit, c.Limit.Charge
		st := ChargedLimitState{OnStatus: ch.OnStatus, Cost: valueSource(ch.Cost), Reserve: valueSource(ch.Reserve),
			KeySource: keySource(ch.Key), Counter: c.Key}
		if c.Key == "" {
			st.LimitState = a.limitStates(ratelimit.Request{Limits: []ratelimit.Limit{l}}, []string{l.Name}, nil)[0]
			st.Key = ""
		} else {
			st.LimitState = a.limitStates(ratelimit.Request{Key: c.Key, Limits: []ratelimit.Limit{l}}, []string{l.Name},
				[]ratelimit.Result{c.Result})[0]
			keys = append(keys, st.Key)
		}
		if p := ch.Lockout; p != nil {
			st.Lockout = &LockoutState{InitialSeconds: seconds(p.Initial), Factor: p.Factor, MaxSeconds: seconds(p.Max),
				ForgetSeconds: seconds(p.ForgetAfter()), LockedForSeconds: seconds(c.LockedFor)}
		}
		out = append(out, st)
	}
	return out, keys
}

func keySource(k policy.ChargeKey) string {
	if k.Name == "" {
		return string(k.Kind)
	}
	return string(k.Kind) + " " + k.Name
}

func valueSource(v *policy.ValueSource) string {
	if v == nil {
		return ""
	}
	var parts []string
	switch {
	case v.Header != "":
		parts = append(parts, "header "+v.Header)
	case v.Trailer != "":
		parts = append(parts, "trailer "+v.Trailer)
	case v.JSONField != "":
		parts = append(parts, "json_field "+v.JSONField)
	}
	if v.HasDefault {
		parts = append(parts, "default "+strconv.FormatInt(v.Default, 10))
	}
	return strings.Join(parts, ", ")
}
