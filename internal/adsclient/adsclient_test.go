package adsclient_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/extauthz/extauthz/internal/adsclient"
	"github.com/extauthz/extauthz/internal/xdstest"
)

const node = "n1"

// set publishes RateLimitConfig resources named (and with the domain)
// names as version for node.
func set(t *testing.T, s *xdstest.Server, version string, names ...string) {
	t.Helper()
	var res []*rlsconfv3.RateLimitConfig
	for _, n := range names {
		res = append(res, &rlsconfv3.RateLimitConfig{Name: n, Domain: n})
	}
	s.Set(t, node, version, res...)
}

// applier keeps what Apply accepted; a resource named "bad" is refused.
type applier struct {
	mu      sync.Mutex
	version string
	names   []string
}

func (a *applier) apply(version string, res []*anypb.Any) error {
	var names []string
	for _, r := range res {
		c := &rlsconfv3.RateLimitConfig{}
		if err := r.UnmarshalTo(c); err != nil {
			return err
		}
		if c.GetName() == "bad" {
			return errors.New("resource bad: refused")
		}
		names = append(names, c.GetName())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.version, a.names = version, names
	return nil
}

// current is the applied version and its resources' names, sorted: a
// snapshot's resources are a map, and go-control-plane sends them in the
// map's order (the names of "v3:a,b" arrived as b,a about once in 15 runs).
func (a *applier) current() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version + ":" + strings.Join(slices.Sorted(slices.Values(a.names)), ",")
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClientAcksNacksAndReconnects(t *testing.T) {
	t.Parallel()
	s := xdstest.Start(t, "127.0.0.1:0", nil)
	set(t, s, "v1", "a")
	a := &applier{}
	c, err := adsclient.New(adsclient.Config{
		Target: s.Addr, Node: &corev3.Node{Id: node, Cluster: "rl"}, TypeURL: resource.RateLimitConfigType,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Apply: a.apply,
		Headers: map[string]string{"x-token": "secret"}, MaxRecvBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run = %v after cancel, want nil", err)
		}
	}()

	eventually(t, "v1", func() bool { return a.current() == "v1:a" })
	if first := s.FirstNode(); first.GetId() != node || first.GetCluster() != "rl" {
		t.Errorf("node %v, want id %s cluster rl", first, node)
	}
	if h := s.Header("x-token"); len(h) != 1 || h[0] != "secret" {
		t.Errorf("stream headers x-token %v, want [secret]", h)
	}

	set(t, s, "v2", "a", "bad")
	eventually(t, "v2 NACKed with the error", func() bool { return s.Nacked("resource bad: refused") })
	if got := a.current(); got != "v1:a" {
		t.Errorf("after a NACK the applied state is %q, want v1:a", got)
	}

	set(t, s, "v3", "a", "b")
	eventually(t, "v3", func() bool { return a.current() == "v3:a,b" })

	// The server goes away and comes back on the same address.
	s.Stop()
	set(t, xdstest.Start(t, s.Addr, nil), "v4", "c")
	eventually(t, "v4 after the reconnect", func() bool { return a.current() == "v4:c" })
}

func TestNewRefusesAnIncompleteConfig(t *testing.T) {
	t.Parallel()
	apply := func(string, []*anypb.Any) error { return nil }
	for name, cfg := range map[string]adsclient.Config{
		"no target":  {Node: &corev3.Node{Id: "n"}, TypeURL: "t", Apply: apply},
		"no node id": {Target: "127.0.0.1:1", Node: &corev3.Node{}, TypeURL: "t", Apply: apply},
		"no type":    {Target: "127.0.0.1:1", Node: &corev3.Node{Id: "n"}, Apply: apply},
		"no apply":   {Target: "127.0.0.1:1", Node: &corev3.Node{Id: "n"}, TypeURL: "t"},
	} {
		if _, err := adsclient.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestARefusedVersionIsNotRetriedInALoop: go-control-plane's snapshot cache
// (Envoy Gateway's controller) answers a NACK, which names the last good
// version, with the refused snapshot again at once. The client validates
// a refused version once, answers its resends after a growing pause
// rather than as fast as the network allows, and takes the next good
// version when it comes.
func TestARefusedVersionIsNotRetriedInALoop(t *testing.T) {
	t.Parallel()
	s := xdstest.Start(t, "127.0.0.1:0", nil)
	set(t, s, "v1", "a")
	var mu sync.Mutex
	applied := map[string]int{}
	a := &applier{}
	c, err := adsclient.New(adsclient.Config{
		Target: s.Addr, Node: &corev3.Node{Id: node}, TypeURL: resource.RateLimitConfigType,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Apply: func(version string, res []*anypb.Any) error {
			mu.Lock()
			applied[version]++
			mu.Unlock()
			return a.apply(version, res)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	eventually(t, "v1", func() bool { return a.current() == "v1:a" })

	set(t, s, "v2", "a", "bad")
	eventually(t, "v2 NACKed", func() bool { return s.Nacked("resource bad: refused") })
	time.Sleep(time.Second) // the time a loop has to show: a paced client NACKs about 10 times
	nacks := s.Nacks("resource bad: refused")
	mu.Lock()
	validated := applied["v2"]
	mu.Unlock()
	if validated != 1 {
		t.Errorf("v2 validated %d times in 1s; a refused version is validated once", validated)
	}
	if nacks > 15 {
		t.Errorf("v2 NACKed %d times in 1s; its resends are answered after a pause growing to 100ms", nacks)
	}
	if got := a.current(); got != "v1:a" {
		t.Errorf("after the NACKs the applied state is %q, want v1:a", got)
	}

	set(t, s, "v3", "b")
	eventually(t, "v3 after the refused v2", func() bool { return a.current() == "v3:b" })
}

// TestReconnectPauseDoubles: while no stream delivers anything (no server
// listens), the pause before each reconnection doubles from MinBackoff up
// to MaxBackoff (each drawn in [pause/2, pause] by the jitter).
func TestReconnectPauseDoubles(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	var mu sync.Mutex
	c, err := adsclient.New(adsclient.Config{Target: "127.0.0.1:1", Node: &corev3.Node{Id: node}, TypeURL: resource.RateLimitConfigType,
		MinBackoff: time.Millisecond, MaxBackoff: 16 * time.Millisecond,
		Apply: func(string, []*anypb.Any) error { return nil },
		OnStreamError: func(_ error, retryIn time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if waits = append(waits, retryIn); len(waits) == 8 {
				cancel()
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, w := range waits {
		pause := min(time.Millisecond<<i, 16*time.Millisecond)
		if w < pause/2 || w > pause {
			t.Errorf("pause %d: %v, want within [%v, %v] (doubling from 1ms, capped at 16ms)", i+1, w, pause/2, pause)
		}
	}
}
