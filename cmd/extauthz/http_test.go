package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// stubStore is a store whose readiness the test sets.
type stubStore struct {
	ratelimit.Store
	ready error
}

func (s *stubStore) Ready(context.Context) error { return s.ready }

func TestReadyz(t *testing.T) {
	t.Parallel()
	loaded := &policy.Policy{}
	cases := []struct {
		name     string
		policy   *policy.Policy
		store    ratelimit.Store
		draining bool
		code     int
		body     string
	}{
		{"ready", loaded, &stubStore{}, false, http.StatusOK, "ready"},
		{"no policy", nil, &stubStore{}, false, http.StatusServiceUnavailable, "policy not loaded"},
		{"store not ready", loaded, &stubStore{ready: errors.New("dial tcp: refused")}, false, http.StatusServiceUnavailable, "store not ready: dial tcp: refused"},
		{"draining", loaded, &stubStore{}, true, http.StatusServiceUnavailable, "shutting down"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := c.policy
			s := &server{
				log:    slog.New(slog.DiscardHandler),
				store:  c.store,
				policy: &policySource{PolicySource: envoy.PolicyFunc(func() *policy.Policy { return p })},
			}
			s.draining.Store(c.draining)
			h := newHTTPServer(s, prometheus.NewRegistry()).Handler
			for path, want := range map[string]int{"/readyz": c.code, "/healthz": http.StatusOK} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				body, _ := io.ReadAll(rec.Body)
				if rec.Code != want {
					t.Errorf("%s = %d %q, want %d", path, rec.Code, body, want)
				}
				if path == "/readyz" && !strings.Contains(string(body), c.body) {
					t.Errorf("/readyz body %q, want %q", body, c.body)
				}
			}
		})
	}
}

// defaultConfig is the configuration with every variable unset: envconfig
// reads the process environment, which must then hold none of ours (tests
// that set some, with setExactEnv, restore it before the next test).
func defaultConfig(t *testing.T) Config {
	t.Helper()
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envPrefix) {
			t.Fatalf("the defaults need an environment without %s* variables; %s is set", envPrefix, kv)
		}
	}
	var cfg Config
	if err := readEnv(&cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// setExactEnv makes env the whole process environment, where envconfig
// reads ours and the peer's translation writes them, until t ends. t.Setenv
// makes t refuse t.Parallel: the environment is the process's.
func setExactEnv(t *testing.T, env map[string]string) {
	t.Helper()
	t.Setenv("EXTAUTHZ_SET_EXACT_ENV", "")
	saved := os.Environ()
	os.Clearenv()
	t.Cleanup(func() {
		os.Clearenv()
		for _, kv := range saved {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
	})
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := defaultConfig(t).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	bad := Config{LogLevel: "loud", FailureMode: "sometimes", MemoryMaxKeys: -1, RedisCallTimeout: -1, IdempotencyStoreTimeout: -1}
	err := bad.Validate()
	for _, name := range []string{"GRPC_ADDR", "HTTP_ADDR", "LOG_LEVEL", "SHUTDOWN_TIMEOUT", "FAILURE_MODE", "MEMORY_MAX_KEYS",
		"REDIS_CALL_TIMEOUT", "IDEMPOTENCY_STORE_TIMEOUT", "REDIS_BREAKER_THRESHOLD", "REDIS_BREAKER_PAUSE"} {
		if err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_"+name+"=") {
			t.Errorf("Validate() = %v, want a problem with EXTAUTHZ_%s", err, name)
		}
	}
}

// /healthcheck is envoyproxy/ratelimit's probe path, which Envoy Gateway's
// startup, readiness and liveness probes all hit: 200 "OK" as the peer
// answers, failing only while draining or without a policy, so that a
// Redis outage (the failure mode answers meanwhile) never has the kubelet
// restart the pod.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	loaded := &policy.Policy{}
	cases := []struct {
		name     string
		policy   *policy.Policy
		store    ratelimit.Store
		draining bool
		code     int
		body     string
	}{
		{"ready", loaded, &stubStore{}, false, http.StatusOK, "OK"},
		{"store not ready", loaded, &stubStore{ready: errors.New("dial tcp: refused")}, false, http.StatusOK, "OK"},
		{"no policy", nil, &stubStore{}, false, http.StatusInternalServerError, "policy not loaded\n"},
		{"draining", loaded, &stubStore{}, true, http.StatusInternalServerError, "shutting down\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := c.policy
			s := &server{
				log:    slog.New(slog.DiscardHandler),
				store:  c.store,
				policy: &policySource{PolicySource: envoy.PolicyFunc(func() *policy.Policy { return p })},
			}
			s.draining.Store(c.draining)
			rec := httptest.NewRecorder()
			newHTTPServer(s, prometheus.NewRegistry()).Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthcheck", nil))
			if body := rec.Body.String(); rec.Code != c.code || body != c.body {
				t.Errorf("/healthcheck = %d %q, want %d %q", rec.Code, body, c.code, c.body)
			}
		})
	}
}
