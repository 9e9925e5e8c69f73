package redisstore_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/inflight/redisstore"
)

// holdingProxy forwards a client's connections to the cluster's nodes.
// Once delay is set it holds the next reply that long (past the client's
// read timeout: the command ran but its caller saw a timeout), and it
// counts the requests that name a given key, so that a re-send shows.
type holdingProxy struct {
	delay atomic.Int64
	mu    sync.Mutex
	addrs map[string]string // node address → proxy address
	seen  bytes.Buffer      // every request byte forwarded
}

func (p *holdingProxy) dial(t *testing.T) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p.mu.Lock()
		front, ok := p.addrs[addr]
		if !ok {
			front = p.listen(t, addr)
			p.addrs[addr] = front
		}
		p.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, front)
	}
}

func (p *holdingProxy) listen(t *testing.T, addr string) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.serve(c, addr)
		}
	}()
	return lis.Addr().String()
}

func (p *holdingProxy) serve(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			p.mu.Lock()
			p.seen.Write(buf[:n])
			p.mu.Unlock()
			if _, err := up.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if err != nil {
			return
		}
		time.Sleep(time.Duration(p.delay.Swap(0))) // one reply only
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// sent counts the forwarded requests naming key.
func (p *holdingProxy) sent(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Count(p.seen.Bytes(), []byte(key))
}

// TestClusterLostAcquireIsNotResent: on the 3-master cluster, through a
// proxy that holds one reply past the client's read timeout, an Acquire
// reaches Redis once (go-redis's cluster client retries timed-out commands
// by default; the store's commands opt out). The lost reply's slot is held
// in Redis, unknown to the caller, until its ttl frees it.
func TestClusterLostAcquireIsNotResent(t *testing.T) {
	t.Parallel()
	cl := redistest.NewCluster(t)
	direct := cl.Client()
	for _, src := range redisstore.Scripts() {
		err := direct.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
			return m.ScriptLoad(ctx, src).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p := &holdingProxy{addrs: map[string]string{}}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, Dialer: p.dial(t), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.Options{Prefix: "noretry"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Acquire(ctx, "warm-up", 1, time.Minute); err != nil {
		t.Fatal(err)
	}

	p.delay.Store(int64(1500 * time.Millisecond))
	if _, _, err := s.Acquire(ctx, "lost", 5, 3*time.Second); err == nil {
		t.Fatal("Acquire succeeded although its reply was held past the read timeout")
	}
	time.Sleep(2 * time.Second) // let anything re-sent reach Redis
	key := s.Key("lost")
	if n := p.sent(key); n != 1 {
		t.Fatalf("Acquire reached Redis %d times, want 1", n)
	}
	if n := direct.ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("%d slots held after the lost Acquire, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for direct.Exists(ctx, key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lost Acquire's slot did not expire with its ttl")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
