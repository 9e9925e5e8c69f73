package upstream

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Held requests count as running per tenant until released; the maximum
// stays at its peak after they end.
func TestConcurrencyPerTenant(t *testing.T) {
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	get := func(tenant string, h ...string) <-chan int {
		out := make(chan int, 1)
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
		req.Header.Set(HeaderTenant, tenant)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				out <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out <- resp.StatusCode
		}()
		return out
	}
	var done []<-chan int
	for range 3 {
		done = append(done, get("a", HeaderHold, "h"))
	}
	done = append(done, get("b", HeaderHold, "h"))
	waitUntil(t, func() bool { return s.Running("a") == 3 && s.Running("b") == 1 })
	s.Release("h")
	for _, d := range done {
		if st := <-d; st != http.StatusOK {
			t.Fatalf("status %d, want 200", st)
		}
	}
	waitUntil(t, func() bool { return s.Running("a") == 0 })
	if m, n := s.MaxConcurrent("a"), s.MaxConcurrent("b"); m != 3 || n != 1 {
		t.Errorf("MaxConcurrent a=%d b=%d, want 3 and 1", m, n)
	}
	// Released before it arrives: it does not wait.
	if st := <-get("a", HeaderHold, "h"); st != http.StatusOK {
		t.Errorf("status %d after release, want 200", st)
	}
}

// X-Upstream-Hold-Body: the headers come at once, the handler keeps
// running (and counting) until the body is released.
func TestHoldBody(t *testing.T) {
	s := New()
	srv := httptest.NewServer(s)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/x", nil)
	req.Header.Set(HeaderTenant, "a")
	req.Header.Set(HeaderHoldBody, "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || s.Running("a") != 1 {
		t.Fatalf("headers: status %d, %d running; want 200 and 1", resp.StatusCode, s.Running("a"))
	}
	s.Release("b")
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || len(line) < 2 || line[0] != '{' {
		t.Fatalf("body %q, %v; want the JSON reply", line, err)
	}
	waitUntil(t, func() bool { return s.Running("a") == 0 })
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
