package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// client sends the tests' requests to Envoy; keep-alive on, as real clients.
var client = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
}

// reply is a fully read HTTP response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// req describes one request; headers are set verbatim. Through a stack
// whose Envoy verifies JWTs (front-proxy.yaml), a request with an
// x-tenant-id header and no authorization header also carries a valid token
// whose sub is that tenant (Envoy then sets x-tenant-id from the token):
// tests written for the tenant header run unchanged.
type req struct {
	method string
	path   string
	header map[string]string
	body   []byte
	// noToken sends no token even when x-tenant-id is set.
	noToken bool
}

// do sends r through Envoy and reads the whole reply.
func (s *stack) do(t testing.TB, r req) reply {
	t.Helper()
	rep, err := s.try(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	return rep
}

// try is do without failing the test (for goroutines and expected errors).
func (s *stack) try(r req) (reply, error) {
	resp, err := s.send(context.Background(), r)
	if err != nil {
		return reply{}, err
	}
	return readReply(resp)
}

// send sends r and returns once the response headers arrived.
func (s *stack) send(ctx context.Context, r req) (*http.Response, error) {
	hr, err := s.newRequest(r)
	if err != nil {
		return nil, err
	}
	return client.Do(hr.WithContext(ctx))
}

// readReply reads and closes resp's body.
func readReply(resp *http.Response) (reply, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{status: resp.StatusCode, header: resp.Header}, fmt.Errorf("read body: %w", err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// newRequest builds r's HTTP request to Envoy, with its token (see req).
func (s *stack) newRequest(r req) (*http.Request, error) {
	if r.method == "" {
		r.method = http.MethodGet
	}
	hr, err := http.NewRequest(r.method, s.url+r.path, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		hr.Header.Set(k, v)
	}
	if s.jwt && !r.noToken && hr.Header.Get("authorization") == "" {
		if tenant := hr.Header.Get("x-tenant-id"); tenant != "" {
			hr.Header.Set("authorization", "Bearer "+tenantToken(tenant))
		}
	}
	return hr, nil
}

// call is a request running in the background (start).
type call struct {
	cancel context.CancelFunc
	// started is closed when the response headers arrived (status set)
	// or the request failed (startErr set); done when the whole reply was
	// read (rep) or it failed (err). Read the fields only after them.
	started, done chan struct{}
	status        int
	startErr      error
	rep           reply
	err           error
}

// start sends r in the background; the request is cancelled, and waited
// for, when the test ends.
func (s *stack) start(t testing.TB, r req) *call {
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{cancel: cancel, started: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { cancel(); <-c.done })
	go func() {
		defer close(c.done)
		resp, err := s.send(ctx, r)
		if err != nil {
			c.startErr, c.err = err, err
			close(c.started)
			return
		}
		c.status = resp.StatusCode
		close(c.started)
		c.rep, c.err = readReply(resp)
	}()
	return c
}

func (r reply) String() string {
	return fmt.Sprintf("%d %v %q", r.status, r.header, truncate(r.body, 300))
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// uniq returns a random name with a prefix, for tenants and keys per test.
func uniq(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// envoyStat reads one counter from Envoy's admin /stats (0 when absent).
func (s *stack) envoyStat(t testing.TB, name string) int {
	t.Helper()
	return envoyStatAt(t, s.admin, name)
}

// envoyStatAt reads one counter from the admin /stats of the Envoy at admin.
func envoyStatAt(t testing.TB, admin, name string) int {
	t.Helper()
	resp, err := probeClient.Get(admin + "/stats?filter=^" + strings.ReplaceAll(name, ".", `\.`) + "$")
	if err != nil {
		t.Fatalf("envoy stats: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && k == name {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
