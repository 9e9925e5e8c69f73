package guard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/guard"
	idemredis "github.com/extauthz/extauthz/pkg/idempotency/redisstore"
)

var errClusterDown = errors.New("CLUSTERDOWN The cluster is down")

// routed is a cluster of fakes: the scope names the node; nodes lists the
// nodes of the map.
type routed struct {
	fakes     map[string]*fake
	mu        sync.Mutex
	nodes     []string
	refreshed int
}

func newRouted(nodes ...string) *routed {
	r := &routed{fakes: map[string]*fake{}, nodes: nodes}
	for _, n := range nodes {
		r.fakes[n] = &fake{}
	}
	return r
}

func (r *routed) Node(_ context.Context, scope, _ string) string { return scope }
func (r *routed) Refresh()                                       { r.mu.Lock(); r.refreshed++; r.mu.Unlock() }
func (r *routed) ClusterDown(err error) bool                     { return errors.Is(err, errClusterDown) }
func (r *routed) Nodes(context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.nodes...), nil
}
func (r *routed) Begin(ctx context.Context, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs) (idempotency.Outcome, error) {
	return r.fakes[scope].Begin(ctx, scope, key, fp, ttls)
}
func (r *routed) Complete(ctx context.Context, l idempotency.Lease, resp idempotency.Response) error {
	return r.fakes[l.Scope].Complete(ctx, l, resp)
}
func (r *routed) Release(ctx context.Context, l idempotency.Lease) error {
	return r.fakes[l.Scope].Release(ctx, l)
}
func (r *routed) Renew(ctx context.Context, l idempotency.Lease) error {
	return r.fakes[l.Scope].Renew(ctx, l)
}
func (r *routed) Close() error { return nil }

// newRoutedFixture wraps r with threshold 3 and a 1s cool-down, recording
// the transitions (read them with the returned function: Prune reports
// on a goroutine of its own).
func newRoutedFixture(t *testing.T, r *routed) (fixture, func() string) {
	t.Helper()
	f := fixture{clock: testclock.New(t0), reg: prometheus.NewRegistry()}
	var mu sync.Mutex
	var changes []string
	s, err := guard.New(r, guard.Options{Registerer: f.reg, FailureThreshold: 3, CoolDown: time.Second, Now: f.clock.Now,
		OnChange: func(node string, open bool, _ error) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, fmt.Sprintf("%s open=%v", node, open))
		}})
	if err != nil {
		t.Fatal(err)
	}
	f.store = s
	return f, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(changes)
	}
}

func begin(s idempotency.Store, scope string) error {
	_, err := s.Begin(context.Background(), scope, "k", fp, ttls)
	return err
}

// TestBreakerPerNode: a failing node's circuit refuses its own keys only.
func TestBreakerPerNode(t *testing.T) {
	t.Parallel()
	r := newRouted("a", "b")
	f, changes := newRoutedFixture(t, r)
	r.fakes["a"].set(errDown)
	for range 3 {
		_ = begin(f.store, "a")
	}
	if err := begin(f.store, "a"); !errors.Is(err, idempotency.ErrUnavailable) || r.fakes["a"].count() != 3 {
		t.Errorf("node a after 3 failures: %v, %d calls; want ErrUnavailable without a call", err, r.fakes["a"].count())
	}
	for range 5 {
		if err := begin(f.store, "b"); err != nil {
			t.Fatalf("node b while only a fails: %v", err)
		}
	}
	if f.circuitOpen() != 1 || f.errorsTotal() != 3 {
		t.Errorf("circuit_open %v, errors %v; want 1 and 3", f.circuitOpen(), f.errorsTotal())
	}
	if changes() != "[a open=true]" {
		t.Errorf("transitions %v", changes())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refreshed == 0 {
		t.Error("node a's failures did not ask for the slot map to be reloaded")
	}
}

// TestClusterDownDoesNotOpen: CLUSTERDOWN goes back to the caller (its
// route's failure_mode applies) and is counted, but never opens the
// answering node's circuit: the first call after the cluster is ok again
// reaches the node.
func TestClusterDownDoesNotOpen(t *testing.T) {
	t.Parallel()
	r := newRouted("a")
	f, changes := newRoutedFixture(t, r)
	r.fakes["a"].set(fmt.Errorf("redis: %w", errClusterDown))
	for i := range 10 {
		if err := begin(f.store, "a"); !errors.Is(err, errClusterDown) {
			t.Fatalf("call %d while the cluster is down: %v", i, err)
		}
	}
	r.fakes["a"].set(nil)
	if err := begin(f.store, "a"); err != nil || r.fakes["a"].count() != 11 {
		t.Errorf("first call with the cluster ok: %v after %d calls to the node, want it through", err, r.fakes["a"].count())
	}
	if f.circuitOpen() != 0 || f.errorsTotal() != 10 || changes() != "[]" {
		t.Errorf("circuit_open %v, errors %v, transitions %v; want 0, 10, none", f.circuitOpen(), f.errorsTotal(), changes())
	}
}

// TestForgetsNodesGoneFromMap: once a failed node is no longer in the map
// (its replica was promoted), its breaker is forgotten and the gauge
// drops, although no call goes to it any more.
func TestForgetsNodesGoneFromMap(t *testing.T) {
	t.Parallel()
	r := newRouted("a", "b")
	f, changes := newRoutedFixture(t, r)
	r.fakes["a"].set(errDown)
	for range 3 {
		_ = begin(f.store, "a")
	}
	r.mu.Lock()
	r.nodes = []string{"b"}
	r.mu.Unlock()
	f.clock.Advance(time.Second) // the last check was at the opening
	deadline := time.Now().Add(5 * time.Second)
	for f.circuitOpen() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("circuit_open %v 5s after a left the map, want 0", f.circuitOpen())
		}
		if err := begin(f.store, "b"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if changes() != "[a open=true a open=false]" {
		t.Errorf("transitions %v", changes())
	}
}

// TestClusterMasterDown: on a real Redis Cluster a stopped master's
// records fail (and its circuit opens) while the other masters' records
// are still stored.
func TestClusterMasterDown(t *testing.T) {
	cl := redistest.NewCluster(t)
	client, err := redisclient.New(redisclient.Options{URL: cl.URL, Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rs, err := idemredis.New(client, idemredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, err := guard.New(rs, guard.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	victim := cl.Nodes[1].Addr
	onVictim := func(i int) bool { return rs.Node(ctx, "acme", fmt.Sprint(i)) == victim }
	cl.Nodes[1].Stop()
	var ok, refused int
	for i := range 300 {
		_, err := s.Begin(ctx, "acme", fmt.Sprint(i), fp, ttls)
		switch {
		case onVictim(i) && errors.Is(err, idempotency.ErrUnavailable):
			refused++
		case onVictim(i):
		case err != nil:
			t.Fatalf("key %d of a healthy master: %v", i, err)
		default:
			ok++
		}
	}
	f := fixture{reg: reg}
	if ok == 0 || refused == 0 || f.circuitOpen() != 1 {
		t.Errorf("%d stored on healthy masters, %d refused on the stopped one, circuit_open %v; want some, some, 1",
			ok, refused, f.circuitOpen())
	}
}
