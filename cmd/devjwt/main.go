// Command devjwt signs a JWT for trying envoy/front-proxy.yaml without an
// identity provider. On first use it writes an ES256 key (key.pem) and its
// public JWKS (jwks.json) into -dir; on every call it writes -envoy's
// configuration there with its jwt_authn provider reading that JWKS
// (local_jwks at -jwks-path instead of the identity provider's URI), and
// prints a token:
//
//	go run ./cmd/devjwt -sub acme -plan pro
//	docker compose up --build    # runs .cache/devjwt/front-proxy.yaml
//	curl -H "authorization: Bearer $(go run ./cmd/devjwt -sub acme)" localhost:10000/things
//
// The issuer and audience default to the shipped provider's. Never point a
// deployed Envoy at this key set: whoever holds key.pem is every caller.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/extauthz/extauthz/internal/devjwt"
)

// kid names the key in the JWKS and in the tokens' header.
const kid = "devjwt"

func main() {
	if err := run(os.Args[1:], os.Stdout, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "devjwt:", err)
		os.Exit(1)
	}
}

// run parses args, makes or reads the key and prints one token to out.
func run(args []string, out io.Writer, now time.Time) error {
	fl := flag.NewFlagSet("devjwt", flag.ContinueOnError)
	dir := fl.String("dir", filepath.Join(".cache", "devjwt"), "where key.pem and jwks.json are kept")
	sub := fl.String("sub", "", "the token's sub: the tenant (required)")
	plan := fl.String("plan", "", "the token's plan claim (none when empty)")
	iss := fl.String("iss", "https://idp.example.com/", "the token's issuer")
	aud := fl.String("aud", "api.example.com", "the token's audience")
	ttl := fl.Duration("ttl", time.Hour, "how long the token is valid")
	envoyFile := fl.String("envoy", filepath.Join("envoy", "front-proxy.yaml"), "the Envoy configuration to copy into -dir with the local key set (\"\" for none)")
	jwksPath := fl.String("jwks-path", "/etc/envoy/jwks.json", "where that Envoy reads jwks.json")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *sub == "" {
		return errors.New("-sub is required")
	}
	key, err := loadOrCreate(*dir)
	if err != nil {
		return err
	}
	if *envoyFile != "" {
		if err := writeEnvoy(*envoyFile, *dir, *jwksPath); err != nil {
			return err
		}
	}
	claims := map[string]any{"iss": *iss, "aud": *aud, "sub": *sub, "iat": now.Unix(), "exp": now.Add(*ttl).Unix()}
	if *plan != "" {
		claims["plan"] = *plan
	}
	tok, err := key.Sign(claims)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, tok)
	return err
}

// loadOrCreate reads dir/key.pem, or makes a key and writes it with
// dir/jwks.json.
func loadOrCreate(dir string) (*devjwt.Key, error) {
	keyPath := filepath.Join(dir, "key.pem")
	b, err := os.ReadFile(keyPath)
	if err == nil {
		return devjwt.ParseKey(b, kid)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key, err := devjwt.NewKey(kid)
	if err != nil {
		return nil, err
	}
	pemBytes, err := key.MarshalPEM()
	if err != nil {
		return nil, err
	}
	jwks, err := devjwt.JWKS(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "jwks.json"), jwks, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyPath, pemBytes, 0o600); err != nil {
		return nil, err
	}
	return key, nil
}

// writeEnvoy writes src into dir, its providers reading jwksPath.
func writeEnvoy(src, dir, jwksPath string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("%w (run from the repository root, or pass -envoy)", err)
	}
	out, err := devjwt.UseLocalJWKS(b, jwksPath)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return os.WriteFile(filepath.Join(dir, filepath.Base(src)), out, 0o644)
}
