package lockout_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit/lockout"
)

func TestValidate(t *testing.T) {
	good := lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
	for _, c := range []struct {
		name  string
		p     lockout.Policy
		field []string // every field the error must name
	}{
		{"zero", lockout.Policy{}, []string{"initial", "factor"}},
		{"sub-millisecond initial", lockout.Policy{Initial: time.Microsecond, Factor: 1, Max: time.Hour}, []string{"initial"}},
		{"factor below 1", lockout.Policy{Initial: time.Minute, Factor: 0.5, Max: time.Hour}, []string{"factor"}},
		{"NaN factor", lockout.Policy{Initial: time.Minute, Factor: math.NaN(), Max: time.Hour}, []string{"factor"}},
		{"infinite factor", lockout.Policy{Initial: time.Minute, Factor: math.Inf(1), Max: time.Hour}, []string{"factor"}},
		{"max below initial", lockout.Policy{Initial: time.Hour, Factor: 2, Max: time.Minute}, []string{"max"}},
		{"max too long", lockout.Policy{Initial: time.Hour, Factor: 2, Max: 400 * 24 * time.Hour}, []string{"max"}},
		{"negative forget", lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour, Forget: -time.Second}, []string{"forget"}},
		{"sub-millisecond forget", lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour, Forget: time.Microsecond}, []string{"forget"}},
		{"forget too long", lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour, Forget: 400 * 24 * time.Hour}, []string{"forget"}},
	} {
		err := c.p.Validate()
		if !errors.Is(err, lockout.ErrInvalid) {
			t.Errorf("%s: Validate = %v, want ErrInvalid", c.name, err)
			continue
		}
		for _, f := range c.field {
			if !strings.Contains(err.Error(), f) {
				t.Errorf("%s: %q does not name %s", c.name, err, f)
			}
		}
	}
}

func TestNext(t *testing.T) {
	p := lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}
	for _, c := range []struct{ prev, want time.Duration }{
		{0, time.Minute},
		{time.Minute, 2 * time.Minute},
		{16 * time.Minute, 32 * time.Minute},
		{32 * time.Minute, time.Hour},
		{time.Hour, time.Hour},
		{10 * time.Hour, time.Hour},          // a longer lockout under an older policy
		{time.Second, time.Minute},           // a shorter one: never below Initial
		{time.Minute + 999, 2 * time.Minute}, // whole milliseconds
	} {
		if got := p.Next(c.prev); got != c.want {
			t.Errorf("Next(%v) = %v, want %v", c.prev, got, c.want)
		}
	}
	flat := lockout.Policy{Initial: time.Minute, Factor: 1, Max: time.Hour}
	if got := flat.Next(5 * time.Minute); got != 5*time.Minute {
		t.Errorf("factor 1: Next(5m) = %v", got)
	}
}

func TestForgetAfter(t *testing.T) {
	p := lockout.Policy{Initial: time.Minute, Factor: 2, Max: time.Hour}
	if got := p.ForgetAfter(); got != 2*time.Hour {
		t.Errorf("default ForgetAfter = %v, want 2*Max", got)
	}
	p.Forget = time.Minute
	if got := p.ForgetAfter(); got != time.Minute {
		t.Errorf("ForgetAfter = %v, want Forget", got)
	}
}

func TestStorageKey(t *testing.T) {
	seen := map[string]string{}
	for _, k := range []string{"a", "a}", "{a}", "a:b", "a%7D", "", strings.Repeat("x", 300), strings.Repeat("x", 301)} {
		sk := lockout.StorageKey(k)
		if strings.ContainsAny(sk, "{}:") || len(sk) > 129 {
			t.Errorf("StorageKey(%q) = %q", k, sk)
		}
		if prev, ok := seen[sk]; ok {
			t.Errorf("StorageKey(%q) = StorageKey(%q)", k, prev)
		}
		seen[sk] = k
	}
}
