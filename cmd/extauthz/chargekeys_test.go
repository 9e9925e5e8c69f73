package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testChargeKeySecret is the charge key secret of the tests that serve an
// account-keyed policy over Redis.
const testChargeKeySecret = "test-charge-key-secret-0123456789abcdef"

// TestChargeKeySecretRequiredWithRedis: with Redis, a policy keying a
// charged limit by an account (examples/policy's login-per-account) needs
// the key secret: serve refuses to start and validate fails, each naming
// the file, the field and the variable; with the secret (or its file)
// validate passes; a short secret is a configuration error.
func TestChargeKeySecretRequiredWithRedis(t *testing.T) {
	t.Parallel()
	redis := []string{"EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0", "EXTAUTHZ_REDIS_URL=redis://127.0.0.1:1",
		"EXTAUTHZ_CONFIG=" + examplePolicy(t)}
	wants := []string{"http.yaml", ".charge.key", "EXTAUTHZ_CHARGE_KEY_SECRET"}
	code, _, stderr := runBinaryWithin(t, 20*time.Second, redis)
	if code != 1 || !containsAll(stderr, wants) {
		t.Errorf("serve without the secret: exit %d, stderr %q; want 1 naming %q", code, stderr, wants)
	}
	code, _, stderr = runBinaryWithin(t, 20*time.Second, redis, "validate", examplePolicy(t))
	if code != 1 || !containsAll(stderr, wants) {
		t.Errorf("validate without the secret: exit %d, stderr %q; want 1 naming %q", code, stderr, wants)
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(testChargeKeySecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"EXTAUTHZ_CHARGE_KEY_SECRET=" + testChargeKeySecret, "EXTAUTHZ_CHARGE_KEY_SECRET_FILE=" + file} {
		if code, _, stderr := runBinaryWithin(t, 20*time.Second, append(redis, secret), "validate", examplePolicy(t)); code != 0 {
			t.Errorf("validate with %s: exit %d, stderr %q", secret, code, stderr)
		}
	}
	code, _, stderr = runBinaryWithin(t, 20*time.Second, append(redis, "EXTAUTHZ_CHARGE_KEY_SECRET=short"), "validate", examplePolicy(t))
	if code != 2 || !strings.Contains(stderr, "EXTAUTHZ_CHARGE_KEY_SECRET=") || strings.Contains(stderr, "short") {
		t.Errorf("a short secret: exit %d, stderr %q; want 2 naming the variable, the value redacted", code, stderr)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
