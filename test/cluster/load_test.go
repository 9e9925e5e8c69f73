package cluster

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// checkRequest is the ext_authz check a mesh sidecar sends for a GET of
// path by tenant (k8s/base/policy/http.yaml: the default route, per-tenant
// limits kept in Redis).
func checkRequest(tenant, path string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: path, Host: "orders.shop.svc.cluster.local", Protocol: "HTTP/1.1",
			Headers: map[string]string{"x-tenant-id": tenant, ":path": path, ":method": "GET"},
		}},
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}},
		}}},
	}}
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// load sends Check calls through the Service at a steady rate over several
// connections (kube-proxy balances per connection, so each may land on
// another pod), the way a fleet of sidecars does, and records every failure.
type load struct {
	name     string // what it goes through, for the log
	conns    int
	interval time.Duration // per connection
	timeout  time.Duration // per call

	mu       sync.Mutex
	sent     int
	ok       int
	denied   int // a decision, not a failure (the limits are far above the rate)
	failures []string
	slow     []string // calls that took over slowCall, with when they started
	lat      []time.Duration

	stop     chan struct{}
	wg       sync.WaitGroup
	finished sync.Once
	summary  string
}

// callTimeout bounds each call. Generous: the machine's CPUs are shared, and
// what the rollout test looks for is a call refused or reset (an address
// that no longer serves), not a slow one; latency is reported, not asserted.
const callTimeout = 5 * time.Second

// slowCall: calls slower than this are listed in the log (a sidecar's
// ext_authz timeout is usually below it), though they do not fail the test.
const slowCall = time.Second

func startLoad(t *testing.T, addr string, conns int, rate int) *load {
	t.Helper()
	return newLoad(conns, rate, func(i int) (string, call) {
		client := authv3.NewAuthorizationClient(dial(t, addr))
		tenant := fmt.Sprintf("load-%d", i)
		return tenant, func(ctx context.Context, n int) (bool, error) {
			resp, err := client.Check(ctx, checkRequest(tenant, fmt.Sprintf("/orders/%d", n)))
			if err != nil {
				return false, err
			}
			return codes.Code(resp.GetStatus().GetCode()) == codes.OK, nil
		}
	})
}

// call is one request of a load's connection: allowed, or denied (a
// decision), or an error (a failure).
type call func(ctx context.Context, n int) (allowed bool, err error)

// newLoad starts conns connections, each made by open (its name and its
// call), sharing rate calls per second.
func newLoad(conns, rate int, open func(i int) (string, call)) *load {
	l := &load{conns: conns, interval: time.Duration(conns) * time.Second / time.Duration(rate), timeout: callTimeout, stop: make(chan struct{})}
	for i := range conns {
		name, do := open(i)
		l.wg.Add(1)
		go l.run(name, do)
	}
	return l
}

func (l *load) run(name string, do call) {
	defer l.wg.Done()
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		n++
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		start := time.Now()
		allowed, err := do(ctx, n)
		elapsed := time.Since(start)
		cancel()
		l.record(name, start, elapsed, allowed, err)
	}
}

func (l *load) record(name string, start time.Time, elapsed time.Duration, allowed bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent++
	l.lat = append(l.lat, elapsed)
	if elapsed > slowCall {
		l.slow = append(l.slow, fmt.Sprintf("%s %s: %s", start.Format("15:04:05.000"), name, elapsed.Round(time.Millisecond)))
	}
	switch {
	case err != nil:
		l.failures = append(l.failures, fmt.Sprintf("%s %s: %v", time.Now().Format("15:04:05.000"), name, err))
	case allowed:
		l.ok++
	default:
		l.denied++
	}
}

// finish stops the load (once) and returns a summary line.
func (l *load) finish() string {
	l.finished.Do(func() {
		close(l.stop)
		l.wg.Wait()
		l.summary = l.summarize()
	})
	return l.summary
}

func (l *load) summarize() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	sort.Slice(l.lat, func(i, j int) bool { return l.lat[i] < l.lat[j] })
	q := func(p float64) time.Duration {
		if len(l.lat) == 0 {
			return 0
		}
		return l.lat[int(p*float64(len(l.lat)-1))].Round(100 * time.Microsecond)
	}
	summary := fmt.Sprintf("%d calls over %d connections: %d allowed, %d denied, %d failed; latency p50 %s p99 %s max %s",
		l.sent, l.conns, l.ok, l.denied, len(l.failures), q(0.5), q(0.99), q(1))
	if len(l.slow) > 0 {
		summary += fmt.Sprintf("; %d over %s:%s", len(l.slow), slowCall, firstLines(l.slow, 10))
	}
	return summary
}

func (l *load) failed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.failures...)
}

func (l *load) allowedSoFar() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

func serviceAddr(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

func firstLines(lines []string, n int) string {
	if len(lines) > n {
		lines = append(lines[:n:n], fmt.Sprintf("... and %d more", len(lines)-n))
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}
