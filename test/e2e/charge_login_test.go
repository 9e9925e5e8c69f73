package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// A login from one source address: Envoy sees the peer address (front-proxy.yaml
// trusts no X-Forwarded-For hop), so each test client binds its own loopback
// address, 127.0.0.0/8 being the host's on Linux.
type loginClient struct {
	s      *stack
	source string
	http   *http.Client
}

// loginFrom returns a client whose connections come from source (an
// address of 127.0.0.0/8).
func (s *stack) loginFrom(t *testing.T, source string) *loginClient {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &loginClient{s: s, source: source, http: &http.Client{Timeout: 30 * time.Second, Transport: tr}}
}

// login posts a JSON login for user to path (a /login route) and returns
// the status and Retry-After (seconds, -1 when absent).
func (c *loginClient) login(t *testing.T, path, user, password string) (status, retryAfter int) {
	t.Helper()
	fields := map[string]string{"password": password}
	if user != "" { // "": a body without the account field
		fields["username"] = user
	}
	body, _ := json.Marshal(fields)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hr, err := c.s.newRequest(req{method: http.MethodPost, path: path, body: body, header: map[string]string{"content-type": "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.http.Do(hr.WithContext(ctx))
	if err != nil {
		t.Fatalf("login from %s: %v", c.source, err)
	}
	rep, err := readReply(resp)
	if err != nil {
		t.Fatalf("login from %s: %v", c.source, err)
	}
	retryAfter = -1
	if v, err := strconv.Atoi(rep.header.Get("Retry-After")); err == nil {
		retryAfter = v
	}
	return rep.status, retryAfter
}

// mustLogin fails the test unless the login answers want.
func (c *loginClient) mustLogin(t *testing.T, path, user, password string, want int) int {
	t.Helper()
	status, ra := c.login(t, path, user, password)
	if status != want {
		t.Fatalf("login of %s from %s: got %d, want %d", user, c.source, status, want)
	}
	return ra
}

const wrongPassword = "hunter2"

// 5 failed logins from one address spend its budget (testdata: 5 a
// minute, gcra): the next attempt is refused even with the right password,
// until the budget frees (one failure's worth after 12s); another address
// is unaffected meanwhile.
func testLoginFailuresPerAddress(t *testing.T, s *stack) {
	a, b := s.loginFrom(t, "127.0.3.1"), s.loginFrom(t, "127.0.3.2")
	user := uniq("user")
	for i := 1; i <= 5; i++ {
		a.mustLogin(t, "/login", user, wrongPassword, http.StatusUnauthorized)
	}
	ra := a.mustLogin(t, "/login", user, upstream.Password, http.StatusTooManyRequests)
	if ra < 1 || ra > 12 {
		t.Fatalf("Retry-After = %d, want 1..12 (one failure frees every 12s)", ra)
	}
	b.mustLogin(t, "/login", uniq("user"), upstream.Password, http.StatusOK)
	time.Sleep(time.Duration(ra)*time.Second + 200*time.Millisecond)
	a.mustLogin(t, "/login", user, upstream.Password, http.StatusOK)
}

// Successful logins never count: 10 of them from one address, then its 5
// failures are still all answered by the upstream, and only the 6th is
// refused.
func testLoginSuccessesNeverCount(t *testing.T, s *stack) {
	c := s.loginFrom(t, "127.0.4.1")
	user := uniq("user")
	for i := 1; i <= 10; i++ {
		c.mustLogin(t, "/login", user, upstream.Password, http.StatusOK)
	}
	for i := 1; i <= 5; i++ {
		c.mustLogin(t, "/login", user, wrongPassword, http.StatusUnauthorized)
	}
	c.mustLogin(t, "/login", user, upstream.Password, http.StatusTooManyRequests)
}

// 20 failures against one account, one from each of 20 addresses (no
// address near its own limit), lock that account: a 21st address with the
// right password is refused. Another account logs in from the same
// addresses, and a body without the account field is not limited by it.
func testLoginFailuresPerAccount(t *testing.T, s *stack) {
	victim, other := uniq("victim"), uniq("other")
	for i := 1; i <= 20; i++ {
		s.loginFrom(t, fmt.Sprintf("127.0.5.%d", i)).mustLogin(t, "/login", victim, wrongPassword, http.StatusUnauthorized)
	}
	last := s.loginFrom(t, "127.0.5.21")
	if ra := last.mustLogin(t, "/login", victim, upstream.Password, http.StatusTooManyRequests); ra < 1 {
		t.Errorf("Retry-After = %d, want a positive number of seconds", ra)
	}
	for i := 1; i <= 21; i += 10 {
		s.loginFrom(t, fmt.Sprintf("127.0.5.%d", i)).mustLogin(t, "/login", other, upstream.Password, http.StatusOK)
	}
	last.mustLogin(t, "/login", "", upstream.Password, http.StatusOK)
}

// The lockout grows as configured (testdata's login-lockout: 2 failures
// per 2s, locked 2s on the first trip, doubling up to 4s): each trip's
// Retry-After is the lockout (whole seconds, rounded up, so a loaded
// machine may see one less), and an attempt after it ends reaches the
// upstream again (by then the budget has refilled).
func testLoginLockoutGrows(t *testing.T, s *stack) {
	c := s.loginFrom(t, "127.0.6.1")
	user := uniq("user")
	for _, want := range []int{2, 4, 4} {
		c.mustLogin(t, "/login/lockout", user, wrongPassword, http.StatusUnauthorized)
		c.mustLogin(t, "/login/lockout", user, wrongPassword, http.StatusUnauthorized)
		ra := c.mustLogin(t, "/login/lockout", user, upstream.Password, http.StatusTooManyRequests)
		if ra < want-1 || ra > want {
			t.Fatalf("locked out for %ds, want %ds", ra, want)
		}
		time.Sleep(time.Duration(ra)*time.Second + 200*time.Millisecond)
	}
	c.mustLogin(t, "/login/lockout", user, upstream.Password, http.StatusOK)
}
