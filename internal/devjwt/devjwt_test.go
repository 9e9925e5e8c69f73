package devjwt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// verify checks a token against a JWKS the way a verifier does: the kid
// picks the key, the signature is r || s over header.payload.
func verify(t *testing.T, jwks []byte, token string) map[string]any {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("token has %d parts", len(parts))
	}
	var header struct{ Alg, Kid string }
	decode(t, parts[0], &header)
	if header.Alg != "ES256" {
		t.Fatalf("alg = %q", header.Alg)
	}
	var set struct {
		Keys []struct{ Kty, Crv, Kid, X, Y string }
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		t.Fatal(err)
	}
	for _, k := range set.Keys {
		if k.Kid != header.Kid || k.Kty != "EC" || k.Crv != "P-256" {
			continue
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, raw(t, k.X)...), raw(t, k.Y)...))
		if err != nil {
			t.Fatal(err)
		}
		sig := raw(t, parts[2])
		sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if len(sig) != 64 || !ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			t.Fatalf("signature does not verify with kid %q", k.Kid)
		}
		var claims map[string]any
		decode(t, parts[1], &claims)
		return claims
	}
	t.Fatalf("no key %q in the JWKS", header.Kid)
	return nil
}

func raw(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal(raw(t, s), v); err != nil {
		t.Fatal(err)
	}
}

func TestSignedTokenVerifiesWithItsJWKSOnly(t *testing.T) {
	t.Parallel()
	k, err := NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := k.Sign(map[string]any{"sub": "acme", "plan": "pro", "exp": 1234})
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := JWKS(k)
	if err != nil {
		t.Fatal(err)
	}
	claims := verify(t, jwks, tok)
	if claims["sub"] != "acme" || claims["plan"] != "pro" || claims["exp"] != float64(1234) {
		t.Errorf("claims = %v", claims)
	}
	// Another key under the same kid: its signature must not verify.
	other, err := NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Sign(map[string]any{"sub": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	fparts := strings.Split(forged, ".")
	sig := raw(t, fparts[2])
	sum := sha256.Sum256([]byte(fparts[0] + "." + fparts[1]))
	if ecdsa.Verify(&k.priv.PublicKey, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		t.Error("a token of another key verifies with this key")
	}
}

func TestPEMRoundTrip(t *testing.T) {
	t.Parallel()
	k, err := NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	p, err := k.MarshalPEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKey(p, "k1")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := back.Sign(map[string]any{"sub": "x"})
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := JWKS(k)
	if err != nil {
		t.Fatal(err)
	}
	verify(t, jwks, tok)
	if _, err := ParseKey([]byte("not pem"), "k1"); err == nil {
		t.Error("ParseKey accepted garbage")
	}
}
