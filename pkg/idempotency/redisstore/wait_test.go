package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/redisstore"
)

var waitTTLs = idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour}

// complete takes key's lease and completes it; it reports Complete's error.
func complete(ctx context.Context, s *redisstore.Store, key string) error {
	o, err := s.Begin(ctx, "scope", key, idempotency.Fingerprint{}, waitTTLs)
	if err != nil {
		return err
	}
	if o.Kind != idempotency.Acquired {
		return fmt.Errorf("begin %s: %v, want Acquired", key, o.Kind)
	}
	return s.Complete(ctx, o.Lease, idempotency.Response{Status: 201, Body: []byte("done")})
}

// TestCompleteWaitsForReplicas: with Wait, Complete returns once the
// replica has the record; with the replica hung, the wait times out, is
// reported as short, and Complete still succeeds (the master has it).
func TestCompleteWaitsForReplicas(t *testing.T) {
	cl := redistest.NewClusterWithReplicas(t)
	var short atomic.Int64
	s, err := redisstore.New(cl.Client(), redisstore.Options{Wait: redisstore.Wait{
		Replicas: 1, Timeout: 500 * time.Millisecond,
		Short: func(string, int64) { short.Add(1) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 20 {
		if err := complete(ctx, s, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := short.Load(); n != 0 {
		t.Fatalf("%d waits short with every replica up", n)
	}
	for _, r := range cl.Replicas {
		r.Pause()
	}
	defer func() {
		for _, r := range cl.Replicas {
			r.Resume()
		}
	}()
	start := time.Now()
	if err := complete(ctx, s, "hung"); err != nil {
		t.Fatalf("Complete with the replicas hung: %v, want nil (stored on the master)", err)
	}
	if short.Load() != 1 || time.Since(start) < 500*time.Millisecond {
		t.Errorf("with the replicas hung: %d short waits after %s, want 1 after the 500ms timeout", short.Load(), time.Since(start))
	}
}

func TestWaitOptionsChecked(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := redisstore.New(c, redisstore.Options{Wait: redisstore.Wait{Replicas: 1}}); err == nil {
		t.Error("Wait without a timeout accepted")
	}
	if _, err := redisstore.New(c, redisstore.Options{Wait: redisstore.Wait{Replicas: -1, Timeout: time.Second}}); err == nil {
		t.Error("negative Replicas accepted")
	}
}

// TestFailoverLosesCompletedRecords measures how many records a SIGKILLed
// master takes with it: records completed on it (Complete returned nil)
// that its promoted replica does not have. Replication is asynchronous, so
// without WAIT some may be lost; with WAIT 1, only records whose wait was
// short may be.
func TestFailoverLosesCompletedRecords(t *testing.T) {
	for _, replicas := range []int{0, 1} {
		t.Run(fmt.Sprint("wait=", replicas), func(t *testing.T) {
			completed, lost, short := failoverLoss(t, replicas)
			t.Logf("WAIT %d: %d records completed on the master before it was killed, %d lost, %d waits short",
				replicas, completed, lost, short)
			if replicas > 0 && lost > short {
				t.Errorf("%d records lost, but only %d waits were short", lost, short)
			}
		})
	}
}

func failoverLoss(t *testing.T, replicas int) (completed, lost, short int) {
	cl := redistest.NewClusterWithReplicas(t)
	client := cl.Client()
	var shortN atomic.Int64
	s, err := redisstore.New(client, redisstore.Options{Wait: redisstore.Wait{
		Replicas: replicas, Timeout: 100 * time.Millisecond,
		Short: func(string, int64) { shortN.Add(1) },
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	victim := cl.Nodes[0]
	var mu sync.Mutex
	var done []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				m, err := client.MasterForKey(ctx, s.Key("scope", key))
				if err != nil || m.Options().Addr != victim.Addr {
					continue
				}
				if complete(ctx, s, key) == nil {
					mu.Lock()
					done = append(done, key)
					mu.Unlock()
				}
			}
		})
	}
	time.Sleep(time.Second)
	victim.Kill()
	close(stop)
	wg.Wait()
	waitRole(t, cl, victim)
	for _, key := range done {
		if readState(t, client, s.Key("scope", key)) != "c" {
			lost++
		}
	}
	return len(done), lost, int(shortN.Load())
}

// waitRole waits until a replica of the killed master reports role:master.
func waitRole(t *testing.T, cl *redistest.Cluster, killed *redistest.Server) {
	t.Helper()
	port := killed.Addr[strings.LastIndex(killed.Addr, ":")+1:]
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range cl.Replicas {
			info, err := r.Client().Info(context.Background(), "replication").Result()
			if err == nil && strings.Contains(info, "role:master") && !strings.Contains(info, "master_port:"+port) {
				if nodes, err := r.Client().ClusterNodes(context.Background()).Result(); err == nil && strings.Contains(nodes, "myself,master") {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no replica promoted within 30s")
}

// readState reads a record's state field once the client's slot map has
// caught up with the failover.
func readState(t *testing.T, c *redis.ClusterClient, key string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := c.HGet(context.Background(), key, "st").Result()
		if err == nil || err == redis.Nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading %s after the failover: %v", key, err)
		}
		c.ReloadState(context.Background())
		time.Sleep(200 * time.Millisecond)
	}
}

// BenchmarkCompleteWait is the cost of WAIT: Begin + Complete of one record
// on a master with one replica, without and with waiting for it.
func BenchmarkCompleteWait(b *testing.B) {
	cl := redistest.NewClusterWithReplicas(b)
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprint("replicas=", replicas), func(b *testing.B) {
			s, err := redisstore.New(cl.Client(), redisstore.Options{Wait: redisstore.Wait{Replicas: replicas, Timeout: 100 * time.Millisecond}})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				if err := complete(ctx, s, fmt.Sprint("b", replicas, "-", i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
