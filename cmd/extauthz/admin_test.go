package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/redistest"
)

// adminAddr returns the admin listener's address from p's log.
func (p *proc) adminAddr(t *testing.T) string {
	t.Helper()
	for line := range strings.SplitSeq(p.Logs(), "\n") {
		var l struct{ Msg, Addr string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "admin listening" {
			return l.Addr
		}
	}
	t.Fatalf("no admin listener logged:\n%s", p.Logs())
	return ""
}

// adminState is the part of the state answer the tests read.
type adminState struct {
	Descriptors []struct {
		Rule   string
		Limits []struct {
			Name, Key string
			Remaining int64
		}
	}
	Reset []string
}

// dailyRemaining runs `extauthz admin ARGS` and returns the remaining of
// the orders-daily limit (a fixed daily window: it does not refill during
// the test, unlike the per-second one).
func dailyRemaining(t *testing.T, env []string, args ...string) (int64, adminState) {
	t.Helper()
	code, stdout, stderr := runBinary(t, env, append([]string{"admin"}, args...)...)
	if code != 0 {
		t.Fatalf("admin %v: exit %d\n%s%s", args, code, stdout, stderr)
	}
	var st adminState
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("admin %v: %v\n%s", args, err, stdout)
	}
	for _, l := range st.Descriptors[0].Limits {
		if l.Name == "orders-daily" {
			return l.Remaining, st
		}
	}
	t.Fatalf("admin %v: no orders-daily limit in %s", args, stdout)
	return 0, st
}

// TestAdminStateTryResetThroughTheBinary: the admin commands against a
// served example policy with a token, on the memory store and on Redis (the
// whole stack: local cache, failover, Redis store): state, one real
// decision, state one less, reset, state full again; without the token,
// 401 and exit 1.
func TestAdminStateTryResetThroughTheBinary(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testAdminThroughTheBinary(t, "acme|edge|route=orders:") })
	t.Run("redis", func(t *testing.T) {
		testAdminThroughTheBinary(t, "xa:rl:{acme|edge|route=orders}:", "EXTAUTHZ_REDIS_URL="+redistest.Standalone(t).URL,
			"EXTAUTHZ_CHARGE_KEY_SECRET="+testChargeKeySecret)
	})
}

// testAdminThroughTheBinary runs the scenario with extra environment; the
// keys reset start with keyPrefix.
func testAdminThroughTheBinary(t *testing.T, keyPrefix string, extra ...string) {
	const token = "test-admin-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, append([]string{"EXTAUTHZ_CONFIG=" + examplePolicy(t), "EXTAUTHZ_ADMIN_ADDR=127.0.0.1:0", "EXTAUTHZ_ADMIN_TOKEN_FILE=" + tokenFile}, extra...)...)
	env := []string{"EXTAUTHZ_ADMIN_ADDR=" + p.adminAddr(t), "EXTAUTHZ_ADMIN_TOKEN=" + token, "EXTAUTHZ_ADMIN_TOKEN_FILE="}
	desc := "tenant=acme,route=orders"
	full, st := dailyRemaining(t, env, "state", "-domain", "edge", desc)
	if full != 50000 || st.Descriptors[0].Rule == "" {
		t.Fatalf("fresh state: remaining %d, %+v", full, st)
	}
	runTry(t, 0, "-addr", p.grpcAddr, desc)
	if got, _ := dailyRemaining(t, env, "state", desc); got != full-1 {
		t.Fatalf("after one decision remaining %d, want %d", got, full-1)
	}
	got, st := dailyRemaining(t, env, "reset", desc)
	if got != full || len(st.Reset) != 2 || !strings.HasPrefix(st.Reset[0], keyPrefix) || !strings.HasPrefix(st.Reset[1], keyPrefix) {
		t.Fatalf("reset: remaining %d, reset keys %v; want %d and both limits' keys under %q", got, st.Reset, full, keyPrefix)
	}
	if got, _ := dailyRemaining(t, env, "explain", desc); got != full {
		t.Fatalf("explain after reset: remaining %d, want %d", got, full)
	}
	code, _, stderr := runBinary(t, []string{"EXTAUTHZ_ADMIN_ADDR=" + p.adminAddr(t), "EXTAUTHZ_ADMIN_TOKEN=", "EXTAUTHZ_ADMIN_TOKEN_FILE="}, "admin", "state", desc)
	if code != 1 || !strings.Contains(stderr, `"status": 401`) {
		t.Fatalf("without the token: exit %d, stderr %s; want 1 and a 401 problem", code, stderr)
	}
	if logs := p.Logs(); !strings.Contains(logs, `"msg":"admin call"`) || !strings.Contains(logs, `"endpoint":"ratelimit_reset"`) {
		t.Errorf("no audit lines in the log:\n%s", logs)
	}
}

// TestAdminRefusesAnOpenAddressWithoutAToken: one line naming the
// variable, exit 2, before anything listens.
func TestAdminRefusesAnOpenAddressWithoutAToken(t *testing.T) {
	code, _, stderr := runBinary(t, []string{"EXTAUTHZ_ADMIN_ADDR=0.0.0.0:0", "EXTAUTHZ_ADMIN_TOKEN=", "EXTAUTHZ_ADMIN_TOKEN_FILE=",
		"EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0"}, "serve")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "EXTAUTHZ_ADMIN_ADDR=") || !strings.Contains(lines[0], "EXTAUTHZ_ADMIN_TOKEN") {
		t.Fatalf("exit %d, stderr %q; want 2 and one line about EXTAUTHZ_ADMIN_ADDR", code, stderr)
	}
}

// TestAdminConfigRules: which address and token combinations start, and
// that each refusal is one rule naming its variable.
func TestAdminConfigRules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	if err := os.WriteFile(good, []byte("  0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(short, []byte("0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := "0123456789abcdef"
	for _, c := range []struct {
		addr, token, file string
		bad               string // the variable refused, "" when accepted
	}{
		{"", "", "", ""},
		{"127.0.0.1:9003", "", "", ""},
		{"localhost:9003", "", "", ""},
		{"0.0.0.0:9003", "", "", "ADMIN_ADDR"},
		{":9003", "", "", "ADMIN_ADDR"},
		{"10.0.0.1:9003", "", "", "ADMIN_ADDR"},
		{"0.0.0.0:9003", tok, "", ""},
		{":9003", "", good, ""},
		{"127.0.0.1", tok, "", "ADMIN_ADDR"},
		{"127.0.0.1:9003", "short", "", "ADMIN_TOKEN"},
		{"127.0.0.1:9003", tok, good, "ADMIN_TOKEN"},
		{":9003", "", short, "ADMIN_TOKEN_FILE"},
		{":9003", "", filepath.Join(dir, "missing"), "ADMIN_TOKEN_FILE"},
	} {
		cfg := Config{AdminAddr: c.addr, AdminToken: c.token, AdminTokenFile: c.file}
		var refused []string
		for _, r := range cfg.rules() {
			if strings.HasPrefix(r.name, "ADMIN_") && !r.ok {
				refused = append(refused, r.name)
			}
		}
		if want := []string{c.bad}; (c.bad == "" && len(refused) != 0) || (c.bad != "" && strings.Join(refused, " ") != want[0]) {
			t.Errorf("addr %q token %q file %q: refused %v, want %q", c.addr, c.token, c.file, refused, c.bad)
		}
	}
	if got, err := (Config{AdminTokenFile: good}).adminToken(); err != nil || got != tok {
		t.Errorf("adminToken from a file = %q, %v; want the trimmed token", got, err)
	}
}
