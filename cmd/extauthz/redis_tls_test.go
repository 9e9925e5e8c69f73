package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
)

// TestRedisClientCertificate: against a Redis that requires a client
// certificate (tls-auth-clients yes), extauthz presents the one our
// variables or the peer's name (Envoy Gateway sets REDIS_TLS_CLIENT_CERT
// and _KEY with a certificateRef), gets ready and decides with its
// counters in that Redis; without one, Redis refuses it, it stays not
// ready, and one log line says what is missing.
func TestRedisClientCertificate(t *testing.T) {
	srv := redistest.StandaloneMutualTLS(t)
	cert, key := srv.ClientCertFiles()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("ours", func(t *testing.T) {
		p := start(t, append([]string{"EXTAUTHZ_CONFIG=" + writePolicy(t), "EXTAUTHZ_REDIS_URL=" + srv.URL,
			"EXTAUTHZ_REDIS_TLS_CA_FILE=" + srv.CAFile(),
			"EXTAUTHZ_REDIS_TLS_CLIENT_CERT=" + cert, "EXTAUTHZ_REDIS_TLS_CLIENT_KEY=" + key}, patient...)...)
		decidesInRedis(t, ctx, p, srv, "ours")
	})

	t.Run("the peer's", func(t *testing.T) {
		root := t.TempDir()
		policyDir := filepath.Join(root, "ratelimit", "config")
		if err := os.MkdirAll(policyDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(policyDir, "shared.yaml"), []byte(sharedPolicy), 0o600); err != nil {
			t.Fatal(err)
		}
		ratelimit := filepath.Join(t.TempDir(), "ratelimit")
		if err := os.Symlink(binary(t), ratelimit); err != nil {
			t.Fatal(err)
		}
		httpPort := freePort(t)
		cmd := exec.Command(ratelimit)
		cmd.Env = append([]string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "USE_STATSD=false",
			"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=" + strconv.Itoa(httpPort),
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "REDIS_TLS=true", "REDIS_TLS_CACERT=" + srv.CAFile(),
			"REDIS_TLS_CLIENT_CERT=" + cert, "REDIS_TLS_CLIENT_KEY=" + key}, patient...)
		p := startCmd(t, cmd)
		p.httpAddr = "127.0.0.1:" + strconv.Itoa(httpPort)
		decidesInRedis(t, ctx, p, srv, "peer")
	})

	t.Run("none", func(t *testing.T) {
		p := start(t, "EXTAUTHZ_CONFIG="+writePolicy(t), "EXTAUTHZ_REDIS_URL="+srv.URL,
			"EXTAUTHZ_REDIS_TLS_CA_FILE="+srv.CAFile())
		eventually(t, "the warm-up failure logged", func() bool { return strings.Contains(p.Logs(), "redis warm-up failed") })
		var lines []string
		for _, line := range strings.Split(p.Logs(), "\n") {
			if strings.Contains(line, "EXTAUTHZ_REDIS_TLS_CLIENT_CERT") {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "redis warm-up failed") || !strings.Contains(lines[0], "client certificate") {
			t.Errorf("want one warm-up line saying Redis wants a client certificate (EXTAUTHZ_REDIS_TLS_CLIENT_CERT), got %q\n%s", lines, p.Logs())
		}
		if code, body := p.get(t, "/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz without a client certificate = %d %q, want 503", code, body)
		}
	})
}

// decidesInRedis waits until p is ready, then has it decide for user: OK
// from Redis (no fallback), with the counter left in srv.
func decidesInRedis(t *testing.T, ctx context.Context, p *proc, srv *redistest.Server, user string) {
	t.Helper()
	waitReady(t, p)
	if ok := callConcurrently(t, []*proc{p}, user, 3); ok != 3 {
		t.Errorf("%d of 3 calls OK under 100/minute, want 3", ok)
	}
	noFallbacks(t, []*proc{p})
	if n, err := srv.Client().DBSize(ctx).Result(); err != nil || n == 0 {
		t.Errorf("Redis holds %d keys (%v), want the counters", n, err)
	}
}
