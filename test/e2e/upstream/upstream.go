// Package upstream is the sample HTTP API that the end-to-end tests put behind
// Envoy (and docker-compose.yaml runs as the "upstream" service). It counts
// executions per tenant and Idempotency-Key, so a test can prove that a
// retried request ran exactly once, and it misbehaves on request: a chosen
// status, a delay, a connection reset, a binary body.
//
// Request headers that steer a reply (Envoy forwards them unchanged):
//
//	X-Upstream-Status: 201        status to answer (default 200)
//	X-Upstream-Delay: 2s          wait before answering (Go duration)
//	X-Upstream-Hold: h1           wait until the test calls Release("h1")
//	                              (after any delay, before any reset or reply)
//	X-Upstream-Hold-Body: h1      send the headers at once and the JSON body
//	                              when the test calls Release("h1"): the
//	                              handler runs on after the response started
//	X-Upstream-Reset: before      reset the connection before any response byte
//	X-Upstream-Reset: mid-body    send headers and half the body, then reset
//	X-Upstream-Body: binary       answer application/octet-stream bytes that
//	                              are not valid UTF-8 (all 256 byte values)
//	X-Upstream-Size: 2097152      answer that many random bytes with their
//	                              Content-Length, in 64 KiB writes
//	X-Upstream-Body-Size: 2097152 answer that many random bytes, streamed in
//	                              64 KiB chunks without Content-Length; the
//	                              X-Upstream-Body-Sha256 header is their hash
//
// POST /login and X-Upstream-Usage serve the limits charged after the fact
// (see charge.go).
//
// Every reply but /healthz is unique per execution (a random id in the body),
// so an identical body on a retry proves a replay, not a second execution.
//
// It also measures concurrency per tenant: how many of a tenant's requests
// are in the handler at once (from arrival until the handler returns, the
// body written or the request gone), and the most there ever were
// (MaxConcurrent), so a test can prove a concurrency limit held at the
// upstream.
package upstream

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Header names the upstream reads; also sent back as X-Upstream-Execution.
const (
	HeaderStatus    = "X-Upstream-Status"
	HeaderDelay     = "X-Upstream-Delay"
	HeaderHold      = "X-Upstream-Hold"
	HeaderHoldBody  = "X-Upstream-Hold-Body"
	HeaderReset     = "X-Upstream-Reset"
	HeaderBody      = "X-Upstream-Body"
	HeaderSize      = "X-Upstream-Size"
	HeaderBodySize  = "X-Upstream-Body-Size"
	HeaderBodySHA   = "X-Upstream-Body-Sha256"
	HeaderExecution = "X-Upstream-Execution"
	HeaderTenant    = "X-Tenant-Id"
	HeaderKey       = "Idempotency-Key"
)

// maxDelay bounds X-Upstream-Delay so a bad header cannot hold a handler forever.
const maxDelay = time.Minute

// Server is the sample API. The zero value is not usable; call New.
type Server struct {
	mu      sync.Mutex
	counts  map[execKey]int
	running map[string]int // tenant -> requests in the handler now
	maxRun  map[string]int // tenant -> most ever in the handler at once
	holds   map[string]chan struct{}
	total   atomic.Int64
}

type execKey struct{ tenant, key string }

// Reply is the JSON body of a normal reply.
type Reply struct {
	// Execution counts the executions of this tenant and key (1 = first).
	Execution int `json:"execution"`
	// ID is random per execution.
	ID           string `json:"id"`
	Method       string `json:"method"`
	Path         string `json:"path"`
	Tenant       string `json:"tenant,omitempty"`
	Key          string `json:"idempotency_key,omitempty"`
	RequestBytes int    `json:"request_bytes"`
}

// New returns a Server with no executions counted.
func New() *Server {
	return &Server{counts: make(map[execKey]int), running: make(map[string]int), maxRun: make(map[string]int), holds: make(map[string]chan struct{})}
}

// Executions reports how often a request with this tenant and
// Idempotency-Key reached the handler (reset or not).
func (s *Server) Executions(tenant, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[execKey{tenant, key}]
}

// Running reports how many requests of tenant are in the handler now.
func (s *Server) Running(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running[tenant]
}

// MaxConcurrent reports the most requests of tenant that were ever in the
// handler at once.
func (s *Server) MaxConcurrent(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxRun[tenant]
}

// enter counts a request of tenant into the handler; the returned func
// counts it out.
func (s *Server) enter(tenant string) (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[tenant]++
	s.maxRun[tenant] = max(s.maxRun[tenant], s.running[tenant])
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.running[tenant]--
	}
}

// Release lets the requests holding on name (X-Upstream-Hold,
// X-Upstream-Hold-Body) go on, and any that hold on it later.
func (s *Server) Release(name string) {
	ch := s.hold(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// hold returns the channel that Release(name) closes.
func (s *Server) hold(name string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.holds[name]
	if !ok {
		ch = make(chan struct{})
		s.holds[name] = ch
	}
	return ch
}

// wait blocks until name is released (true) or the client goes away.
func (s *Server) wait(r *http.Request, name string) bool {
	select {
	case <-s.hold(name):
		return true
	case <-r.Context().Done():
		return false
	}
}

// Total reports every execution, /healthz excluded.
func (s *Server) Total() int64 { return s.total.Load() }

// ServeHTTP implements the API: GET /healthz answers 200 "ok" uncounted;
// GET /_executions?tenant=T&key=K reports a count and GET
// /_concurrency?tenant=T the tenant's running and most concurrent requests
// (for curl users); every other request is one counted execution.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.serveInfo(w, r) {
		return
	}
	defer s.enter(r.Header.Get(HeaderTenant))()
	if strings.HasPrefix(r.URL.Path, LoginPath) {
		s.count(r)
		serveLogin(w, r)
		return
	}
	n := s.count(r)
	body, _ := io.ReadAll(r.Body)
	if !sleep(r) {
		return
	}
	if h := r.Header.Get(HeaderHold); h != "" && !s.wait(r, h) {
		return
	}
	switch r.Header.Get(HeaderReset) {
	case "before":
		resetConn(w, nil)
		return
	case "mid-body":
		resetConn(w, []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"partial\":"))
		return
	}
	status := http.StatusOK
	if v, err := strconv.Atoi(r.Header.Get(HeaderStatus)); err == nil && v >= 200 && v <= 599 {
		status = v
	}
	w.Header().Set(HeaderExecution, strconv.Itoa(n))
	// Never replayed by extauthz's header allow-list.
	w.Header().Set("Set-Cookie", "session="+randomHex(8))
	if size, err := strconv.ParseInt(r.Header.Get(HeaderSize), 10, 64); err == nil && size >= 0 && size <= maxSize {
		writeRandom(w, status, size)
		return
	}
	if n, err := strconv.ParseInt(r.Header.Get(HeaderBodySize), 10, 64); err == nil && n >= 0 && n <= maxBodySize {
		writeLarge(w, status, n)
		return
	}
	if h := r.Header.Get(HeaderHoldBody); h != "" {
		s.writeLate(w, r, status, h, Reply{
			Execution: n, ID: randomHex(16), Method: r.Method, Path: r.URL.Path, Tenant: r.Header.Get(HeaderTenant),
		})
		return
	}
	if writeUsage(w, r, status, Reply{Execution: n, ID: randomHex(16), Method: r.Method, Path: r.URL.Path,
		Tenant: r.Header.Get(HeaderTenant), Key: r.Header.Get(HeaderKey), RequestBytes: len(body)}) {
		return
	}
	if r.Header.Get(HeaderBody) == "binary" {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(status)
		_, _ = w.Write(BinaryBody(randomHex(16)))
		return
	}
	writeJSON(w, status, Reply{
		Execution: n, ID: randomHex(16), Method: r.Method, Path: r.URL.Path,
		Tenant: r.Header.Get(HeaderTenant), Key: r.Header.Get(HeaderKey), RequestBytes: len(body),
	})
}

// serveInfo answers the uncounted paths: /healthz and the counts; false
// for any other path.
func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query()
	switch r.URL.Path {
	case "/healthz":
		_, _ = io.WriteString(w, "ok\n")
	case "/_executions":
		writeJSON(w, http.StatusOK, map[string]int{"executions": s.Executions(q.Get("tenant"), q.Get("key"))})
	case "/_concurrency":
		t := q.Get("tenant")
		writeJSON(w, http.StatusOK, map[string]int{"running": s.Running(t), "max": s.MaxConcurrent(t)})
	default:
		return false
	}
	return true
}

// BinaryBody is the binary reply: every byte value 0..255 (not valid UTF-8),
// then the execution's random id.
func BinaryBody(id string) []byte {
	b := make([]byte, 0, 256+len(id))
	for i := 0; i < 256; i++ {
		b = append(b, byte(i))
	}
	return append(b, id...)
}

func (s *Server) count(r *http.Request) int {
	s.total.Add(1)
	k := execKey{r.Header.Get(HeaderTenant), r.Header.Get(HeaderKey)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[k]++
	return s.counts[k]
}

// sleep honours X-Upstream-Delay; false when the client went away first.
func sleep(r *http.Request) bool {
	d, err := time.ParseDuration(r.Header.Get(HeaderDelay))
	if err != nil || d <= 0 {
		return true
	}
	t := time.NewTimer(min(d, maxDelay))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// resetConn writes raw bytes (if any) and closes the connection with a TCP
// RST (SO_LINGER 0), which Envoy sees as an upstream reset.
func resetConn(w http.ResponseWriter, raw []byte) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "cannot hijack", http.StatusInternalServerError)
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	if len(raw) > 0 {
		_, _ = buf.Write(raw)
		_ = buf.Flush()
		// Let Envoy read the partial response before the reset discards it.
		time.Sleep(50 * time.Millisecond)
	}
	if tcp, ok := conn.(interface{ SetLinger(int) error }); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// maxBodySize bounds X-Upstream-Body-Size.
const maxBodySize = 1 << 30

// writeLarge streams n random bytes (unique per execution), announcing
// their SHA-256 in a header; chunked, so nothing downstream knows the size
// before the end.
func writeLarge(w http.ResponseWriter, status int, n int64) {
	body := make([]byte, n)
	_, _ = rand.Read(body)
	sum := sha256.Sum256(body)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(HeaderBodySHA, hex.EncodeToString(sum[:]))
	w.WriteHeader(status)
	f, _ := w.(http.Flusher)
	for len(body) > 0 {
		c := body[:min(len(body), 64<<10)]
		if _, err := w.Write(c); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
		body = body[len(c):]
	}
}

// writeLate sends the headers at once and the JSON body when hold is
// released (nothing more if the client goes away first).
func (s *Server) writeLate(w http.ResponseWriter, r *http.Request, status int, hold string, v Reply) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if s.wait(r, hold) {
		_ = json.NewEncoder(w).Encode(v)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxSize bounds X-Upstream-Size (the e2e tests go up to 100 MiB + 1).
const maxSize = 256 << 20

// writeRandom streams size pseudo-random bytes, seeded per execution, in
// 64 KiB writes: the upstream's memory does not grow with the body.
func writeRandom(w http.ResponseWriter, status int, size int64) {
	var seed [32]byte
	_, _ = rand.Read(seed[:])
	src := mrand.NewChaCha8(seed)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(status)
	buf := make([]byte, 64<<10)
	for size > 0 {
		n := min(int64(len(buf)), size)
		_, _ = src.Read(buf[:n])
		if _, err := w.Write(buf[:n]); err != nil {
			return
		}
		size -= n
	}
}
