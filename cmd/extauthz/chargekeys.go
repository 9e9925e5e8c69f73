package main

import (
	"os"
	"strings"
)

// minChargeKeySecret is the shortest charge key secret accepted: the HMAC
// key under which account names are hashed into Redis keys (a short one
// could be guessed, and the accounts read back by a dictionary).
const minChargeKeySecret = 32

// chargeKeySecret returns the configured secret (EXTAUTHZ_CHARGE_KEY_SECRET,
// or the trimmed contents of EXTAUTHZ_CHARGE_KEY_SECRET_FILE), nil when
// none: pkg/envoy/authz then draws one per process.
func (c Config) chargeKeySecret() ([]byte, error) {
	if c.ChargeKeySecretFile == "" {
		if c.ChargeKeySecret == "" {
			return nil, nil
		}
		return []byte(c.ChargeKeySecret), nil
	}
	b, err := os.ReadFile(c.ChargeKeySecretFile)
	return []byte(strings.TrimSpace(string(b))), err
}

func (c Config) validChargeKeySecretFile() bool {
	if c.ChargeKeySecretFile == "" {
		return true
	}
	s, err := c.chargeKeySecret()
	return err == nil && len(s) >= minChargeKeySecret
}

// accountKeysRefused is why the policy may not key a charged limit by an
// account (a header, form_field or json_field), "" when it may: a shared
// store without a secret. A secret drawn per process would give each
// replica its own key for one account (as many budgets as replicas) and a
// fresh one at each restart. The policy loader reports each such limit,
// at start-up and on every reload or xDS update.
func (c Config) accountKeysRefused() string {
	if c.RedisURL == "" || c.ChargeKeySecret != "" || c.ChargeKeySecretFile != "" {
		return ""
	}
	return "an account key (header, form_field, json_field) with a shared store (EXTAUTHZ_REDIS_URL) needs EXTAUTHZ_CHARGE_KEY_SECRET " +
		"or EXTAUTHZ_CHARGE_KEY_SECRET_FILE, the same on every replica: accounts are hashed under it"
}
