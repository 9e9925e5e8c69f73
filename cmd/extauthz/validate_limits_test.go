package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/policy"
)

// TestValidateWarnsAboutLimits: a route whose max_body_bytes cannot be
// carried by the gRPC limits or the shipped Envoy buffers is named in a
// warning; a route within them is not.
func TestValidateWarnsAboutLimits(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "p.yaml")
	yaml := "http:\n  routes:\n" +
		"    - {name: small, path_prefix: /s, idempotency: {max_body_bytes: 1000}}\n" +
		"    - {name: big, path_prefix: /b, idempotency: {max_body_bytes: 2000000}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(limitWarnings(p, func() (int, int) { return 1 << 20, 1 << 20 }), "\n")
	for _, want := range []string{"EXTAUTHZ_GRPC_MAX_SEND_BYTES 1048576", "EXTAUTHZ_GRPC_MAX_RECV_BYTES 1048576", "buffer limit"} {
		if !strings.Contains(got, `route "big"`) || !strings.Contains(got, want) {
			t.Errorf("warnings %q lack route big and %q", got, want)
		}
	}
	if strings.Contains(got, `route "small"`) {
		t.Errorf("warnings %q name route small, within every limit", got)
	}
	if w := limitWarnings(p, func() (int, int) { return 64 << 20, 64 << 20 }); len(w) != 1 {
		t.Errorf("with 64 MiB gRPC limits: %q, want only the Envoy buffer warning", w)
	}
}
