// Package envoytest holds the test helpers the tests of pkg/envoy, rls and
// authz share: a fixed instant, policies written to disk, a real memory
// store behind a recording (or failing) wrapper, a loopback gRPC server
// with the production codec, metric readers, and RLS request builders.
package envoytest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// T0 is a fixed instant 15 s into a minute (and an hour, and a day), so
// fixed windows of a minute end 45 s later.
var T0 = time.Date(2026, 3, 1, 12, 0, 15, 0, time.UTC)

// Clock is a settable clock for the stores.
type Clock = testclock.Clock

// RecordingStore wraps a store and records every AllowBatch call; err,
// when set, is returned instead of deciding.
type RecordingStore struct {
	ratelimit.Store
	mu    sync.Mutex
	calls [][]ratelimit.Request
	err   error
	reply func([]ratelimit.Request) []ratelimit.Decision // overrides the reply when set
}

// AllowBatch records reqs, then answers with err, reply or the wrapped store.
func (s *RecordingStore) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	s.mu.Lock()
	s.calls = append(s.calls, append([]ratelimit.Request(nil), reqs...))
	err, reply := s.err, s.reply
	s.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case reply != nil:
		return reply(reqs), nil
	}
	return s.Store.AllowBatch(ctx, reqs)
}

// SetErr makes every later call fail with err (nil: decide again).
func (s *RecordingStore) SetErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// SetReply makes every later call answer with reply's decisions.
func (s *RecordingStore) SetReply(reply func([]ratelimit.Request) []ratelimit.Decision) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reply = reply
}

// Calls returns the requests of every call so far.
func (s *RecordingStore) Calls() [][]ratelimit.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]ratelimit.Request(nil), s.calls...)
}

// WritePolicy writes yaml to a file in a fresh directory and loads it.
func WritePolicy(t testing.TB, yaml string) *policy.Policy {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(path)
	if err != nil {
		t.Fatalf("policy.Load: %v", err)
	}
	return p
}

// ServeLoopback serves svc on a loopback TCP port with the production
// codec and returns a client connection to it; both stop when the test ends.
func ServeLoopback(t *testing.T, svc interface{ Register(grpc.ServiceRegistrar) }) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(envoy.NewCodec()))
	svc.Register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		<-done
	})
	return conn
}

// CounterValue reads one sample of a counter from reg; 0 when absent.
func CounterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
