// Package devjwt signs JSON Web Tokens with an ES256 key of its own and
// publishes the key as a JWKS, for the end-to-end tests and for trying the
// shipped Envoy configuration locally (cmd/devjwt). It is not an identity
// provider: keys live in memory or in a PEM file the caller chooses, and
// nothing checks who asks for a token. Only the standard library is used.
package devjwt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
)

// Key is an ES256 (ECDSA P-256, SHA-256) signing key and its key ID.
type Key struct {
	priv *ecdsa.PrivateKey
	// KID is the "kid" of the tokens' header and of the JWKS entry.
	KID string
}

// NewKey generates a fresh P-256 key named kid.
func NewKey(kid string) (*Key, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("devjwt: generate key: %w", err)
	}
	return &Key{priv: priv, KID: kid}, nil
}

// ParseKey reads a key written by MarshalPEM.
func ParseKey(pemBytes []byte, kid string) (*Key, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "EC PRIVATE KEY" {
		return nil, errors.New("devjwt: no EC PRIVATE KEY block")
	}
	priv, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("devjwt: %w", err)
	}
	if priv.Curve != elliptic.P256() {
		return nil, errors.New("devjwt: the key is not on P-256")
	}
	return &Key{priv: priv, KID: kid}, nil
}

// MarshalPEM returns the private key as a PEM "EC PRIVATE KEY" block.
func (k *Key) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k.priv)
	if err != nil {
		return nil, fmt.Errorf("devjwt: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// JWKS returns a JSON Web Key Set holding the public half of each key, as
// Envoy's jwt_authn reads it (local_jwks or a remote JWKS URI).
func JWKS(keys ...*Key) ([]byte, error) {
	type jwk struct {
		Kty string `json:"kty"`
		Crv string `json:"crv"`
		Alg string `json:"alg"`
		Use string `json:"use"`
		Kid string `json:"kid"`
		X   string `json:"x"`
		Y   string `json:"y"`
	}
	set := struct {
		Keys []jwk `json:"keys"`
	}{Keys: []jwk{}}
	for _, k := range keys {
		// The uncompressed point: 0x04, then X and Y, 32 bytes each.
		pt, err := k.priv.PublicKey.Bytes()
		if err != nil || len(pt) != 65 {
			return nil, fmt.Errorf("devjwt: public key of %q: %v", k.KID, err)
		}
		set.Keys = append(set.Keys, jwk{Kty: "EC", Crv: "P-256", Alg: "ES256", Use: "sig", Kid: k.KID,
			X: b64(pt[1:33]), Y: b64(pt[33:])})
	}
	return json.Marshal(set)
}

// Sign returns a compact JWS (header.payload.signature) of claims, signed
// ES256 with a header naming k.KID. Claims are marshalled as they are: set
// iss, aud, sub, exp and the rest yourself.
func (k *Key) Sign(claims map[string]any) (string, error) {
	header, err := json.Marshal(map[string]string{"alg": "ES256", "typ": "JWT", "kid": k.KID})
	if err != nil {
		return "", fmt.Errorf("devjwt: %w", err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", fmt.Errorf("devjwt: claims: %w", err)
	}
	signed := b64(header) + "." + b64(payload)
	sum := sha256.Sum256([]byte(signed))
	r, s, err := ecdsa.Sign(rand.Reader, k.priv, sum[:])
	if err != nil {
		return "", fmt.Errorf("devjwt: sign: %w", err)
	}
	// JWS wants the raw r || s, each 32 bytes (RFC 7518 §3.4), not ASN.1.
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signed + "." + b64(sig), nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
