package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/ratelimit/fleet"
)

func newPresence(t *testing.T, client redisscript.Processor, opts fleet.Options) (*fleet.Presence, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	p, err := fleet.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, reg
}

func beat(t *testing.T, p *fleet.Presence, want int) {
	t.Helper()
	n, err := p.Beat(context.Background())
	if err != nil || n != want || p.Count() != want {
		t.Fatalf("Beat = %d, %v (Count %d), want %d live replicas", n, err, p.Count(), want)
	}
}

// TestCountsTheLiveReplicas: every beat counts the replicas whose last beat
// is younger than the TTL; one that stops beating is forgotten at its TTL,
// one that closes at once.
func TestCountsTheLiveReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	client := srv.Client()
	clk := testclock.New(time.Unix(1_700_000_000, 0))
	opts := fleet.Options{Prefix: "t1", Interval: 2 * time.Second, Now: clk.Now} // TTL 6s
	a, _ := newPresence(t, client, opts)
	b, _ := newPresence(t, client, opts)
	c, reg := newPresence(t, client, opts)
	if a.Count() != 0 {
		t.Fatalf("Count before any beat = %d, want 0", a.Count())
	}
	beat(t, a, 1)
	beat(t, b, 2)
	beat(t, c, 3)
	beat(t, a, 3) // a beat refreshes, never adds
	if g := gauge(t, reg); g != 3 {
		t.Errorf("extauthz_redis_replicas_seen = %v, want 3", g)
	}

	clk.Advance(5 * time.Second) // a beat 5s ago: alive
	beat(t, b, 3)
	beat(t, c, 3)
	clk.Advance(2 * time.Second) // a beat 7s ago: gone
	beat(t, b, 2)
	c.Close()
	beat(t, b, 1)
	if ttl := client.PTTL(context.Background(), b.Key()).Val(); ttl <= 0 || ttl > 6*time.Second {
		t.Errorf("the set's TTL is %s, want at most the replicas' 6s", ttl)
	}
}

// TestCountOutlivesTheOutage: while Redis is down a beat fails and the
// count seen before stays, which is what the fallback divides by.
func TestCountOutlivesTheOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	client := srv.Client()
	a, _ := newPresence(t, client, fleet.Options{})
	b, _ := newPresence(t, client, fleet.Options{})
	beat(t, a, 1)
	beat(t, b, 2)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := b.Beat(ctx)
	if err == nil || n != 2 || b.Count() != 2 {
		t.Fatalf("beat with Redis down = %d, %v (Count %d), want an error and the count of 2 kept", n, err, b.Count())
	}
}

// TestStartBeatsAtOnce: Start counts without waiting a whole interval, and
// Close stops the goroutine and leaves the set.
func TestStartBeatsAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	client := srv.Client()
	var errs []error
	p, _ := newPresence(t, client, fleet.Options{Interval: time.Hour, OnError: func(err error) { errs = append(errs, err) }})
	p.Start()
	deadline := time.Now().Add(10 * time.Second)
	for p.Count() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("no count 10s after Start with a 1h interval")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Close()
	p.Close()
	if n := client.ZCard(context.Background(), p.Key()).Val(); n != 0 || len(errs) != 0 {
		t.Errorf("after Close the set holds %d members (errors %v), want 0", n, errs)
	}
}

// TestOneSlotOnACluster: the count is one key, so it works on a Redis
// Cluster without CROSSSLOT or SCAN.
func TestOneSlotOnACluster(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	client := cl.Client()
	a, _ := newPresence(t, client, fleet.Options{})
	b, _ := newPresence(t, client, fleet.Options{})
	beat(t, a, 1)
	beat(t, b, 2)
}

func TestRejectsBadOptions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	for _, o := range []fleet.Options{
		{Prefix: "x{y}", Registerer: reg},
		{Interval: time.Second, TTL: time.Millisecond, Registerer: reg},
		{Interval: -time.Second, Registerer: reg},
		{},
	} {
		if _, err := fleet.New(noClient{}, o); !errors.Is(err, fleet.ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}

// noClient fails every command, as a Redis never reached does.
type noClient struct{}

func (noClient) Process(_ context.Context, cmd redis.Cmder) error {
	err := errors.New("a command was sent")
	cmd.SetErr(err)
	return err
}

func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "extauthz_redis_replicas_seen" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestCloseWithoutBeatSendsNothing: a replica that never counted itself
// (its Redis never answered the warm-up) has nothing to remove.
func TestCloseWithoutBeatSendsNothing(t *testing.T) {
	t.Parallel()
	var errs []error
	p, err := fleet.New(noClient{}, fleet.Options{Registerer: prometheus.NewRegistry(), OnError: func(err error) { errs = append(errs, err) }})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if len(errs) != 0 {
		t.Errorf("Close sent a command: %v", errs)
	}
}
