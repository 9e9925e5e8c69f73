package failover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/failover"
)

var errClusterDown = errors.New("CLUSTERDOWN The cluster is down")

// routedFlaky is a flaky primary whose keys all live on the first of the
// nodes its map names, and that calls errClusterDown the cluster's state.
type routedFlaky struct {
	flaky
	fail  error // returned while set, instead of flaky's errDown
	mapMu sync.Mutex
	nodes []string
}

func (r *routedFlaky) Node(context.Context, string) string {
	r.mapMu.Lock()
	defer r.mapMu.Unlock()
	return r.nodes[0]
}
func (r *routedFlaky) Refresh()                   {}
func (r *routedFlaky) ClusterDown(err error) bool { return errors.Is(err, errClusterDown) }
func (r *routedFlaky) Nodes(context.Context) ([]string, error) {
	r.mapMu.Lock()
	defer r.mapMu.Unlock()
	return r.nodes, nil
}

func (r *routedFlaky) AllowBatch(ctx context.Context, reqs []ratelimit.Request) ([]ratelimit.Decision, error) {
	d, err := r.flaky.AllowBatch(ctx, reqs)
	if err != nil && r.fail != nil {
		return nil, r.fail
	}
	return d, err
}

// TestClusterDownKeepsCircuitClosed: CLUSTERDOWN answers go to the failure
// mode and are counted as errors, but never open the node's circuit: the
// first call after the cluster is ok is decided by the primary.
func TestClusterDownKeepsCircuitClosed(t *testing.T) {
	t.Parallel()
	p := &routedFlaky{fail: errClusterDown, nodes: []string{"n1"}}
	reg := prometheus.NewRegistry()
	s, err := failover.New(p, failover.Options{Mode: failover.Closed, Registerer: reg, Now: (&fakeClock{t: time.Unix(1000, 0)}).now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.set(true)
	for i := range 3 * failover.DefaultFailureThreshold {
		if res, err := s.Allow(ctx, "k", oneMinute, 1); err != nil || res.Allowed {
			t.Fatalf("call %d during CLUSTERDOWN: %+v, %v; want a closed-mode denial", i, res, err)
		}
	}
	p.set(false)
	if res, err := s.Allow(ctx, "k", oneMinute, 1); err != nil || res.Remaining != 42 {
		t.Fatalf("first call with the cluster ok: %+v, %v; want the primary's answer", res, err)
	}
	if got := sumMetric(t, reg, "extauthz_redis_errors_total"); got != 3*failover.DefaultFailureThreshold {
		t.Errorf("errors counted %v, want %d", got, 3*failover.DefaultFailureThreshold)
	}
	if got := sumMetric(t, reg, "extauthz_redis_circuit_open"); got != 0 {
		t.Errorf("circuit_open %v, want 0", got)
	}
}

// TestDepartedNodeForgotten: a node whose circuit opened and which then
// left the map (its replica promoted) no longer counts as open, though no
// call goes to it any more.
func TestDepartedNodeForgotten(t *testing.T) {
	t.Parallel()
	p := &routedFlaky{nodes: []string{"n1"}}
	reg := prometheus.NewRegistry()
	clock := &fakeClock{t: time.Unix(1000, 0)}
	s, err := failover.New(p, failover.Options{Mode: failover.Closed, Registerer: reg, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.set(true)
	for range failover.DefaultFailureThreshold {
		_, _ = s.Allow(ctx, "k", oneMinute, 1)
	}
	if got := sumMetric(t, reg, "extauthz_redis_circuit_open"); got != 1 {
		t.Fatalf("circuit_open %v after %d failures, want 1", got, failover.DefaultFailureThreshold)
	}
	p.mapMu.Lock()
	p.nodes = []string{"n2"} // n1's replica, promoted
	p.mapMu.Unlock()
	p.set(false)
	clock.add(failover.DefaultCoolDown)
	deadline := time.Now().Add(5 * time.Second)
	for sumMetric(t, reg, "extauthz_redis_circuit_open") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("circuit_open still 1 5s after n1 left the map")
		}
		_, _ = s.Allow(ctx, "k", oneMinute, 1)
		time.Sleep(time.Millisecond)
	}
}
