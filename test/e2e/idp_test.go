package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/extauthz/extauthz/internal/devjwt"
)

// The issuer and audience envoy/front-proxy.yaml's provider accepts: the
// tests sign with the shipped values; only the key set is theirs.
const (
	testIssuer   = "https://idp.example.com/"
	testAudience = "api.example.com"
)

// testIDP signs the tests' tokens. Its JWKS file replaces every jwt_authn
// provider's key set when a configuration is rendered (renderSpec.jwks).
var testIDP struct {
	// key signs valid tokens; its public half is the JWKS file's only key.
	key *devjwt.Key
	// stranger has the same kid as key but is in no JWKS: its tokens are
	// wrongly signed.
	stranger *devjwt.Key
	// jwks is the JWKS file.
	jwks string

	mu     sync.Mutex
	tokens map[string]string // sub -> valid token, for tenantToken
}

// newTestIDP makes the keys and writes the JWKS file into dir (once per
// package run, from TestMain).
func newTestIDP(dir string) error {
	var err error
	if testIDP.key, err = devjwt.NewKey("e2e"); err != nil {
		return err
	}
	if testIDP.stranger, err = devjwt.NewKey("e2e"); err != nil {
		return err
	}
	b, err := devjwt.JWKS(testIDP.key)
	if err != nil {
		return err
	}
	testIDP.jwks = filepath.Join(dir, "jwks.json")
	testIDP.tokens = map[string]string{}
	// Readable by the Envoy image's user (101) under E2E_ENVOY=docker: a
	// public key set.
	return os.WriteFile(testIDP.jwks, b, 0o644)
}

// claims are a valid token's claims for sub (no sub claim when sub is ""),
// valid for an hour; extra claims are added or, with a nil value, removed.
func claims(sub string, extra map[string]any) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": testIssuer, "aud": testAudience, "sub": sub,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if sub == "" {
		delete(c, "sub")
	}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// sign returns "Bearer <token>" of the claims signed by key.
func sign(key *devjwt.Key, c map[string]any) string {
	tok, err := key.Sign(c)
	if err != nil {
		panic(fmt.Sprintf("sign test token: %v", err)) // crypto/rand failed: nothing can run
	}
	return "Bearer " + tok
}

// bearer is a valid token for sub with the extra claims (see claims).
func bearer(sub string, extra map[string]any) string {
	return sign(testIDP.key, claims(sub, extra))
}

// tenantToken is a valid token whose sub is tenant (no other claims),
// signed once per tenant.
func tenantToken(tenant string) string {
	testIDP.mu.Lock()
	defer testIDP.mu.Unlock()
	if tok, ok := testIDP.tokens[tenant]; ok {
		return tok
	}
	tok, err := testIDP.key.Sign(claims(tenant, nil))
	if err != nil {
		panic(fmt.Sprintf("sign test token: %v", err))
	}
	testIDP.tokens[tenant] = tok
	return tok
}
