package redisstore

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// slowReplies is a TCP proxy to addr that forwards requests at once and,
// once *delay is set, holds the next script reply that long: to a client with a
// shorter read timeout that reply is lost after the script ran, while a
// retry on a new connection would go through.
func slowReplies(t *testing.T, addr string, delay *atomic.Int64) string {
	t.Helper()
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
			go proxyConn(c, addr, delay)
		}
	}()
	return lis.Addr().String()
}

func proxyConn(c net.Conn, addr string, delay *atomic.Int64) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c) }()
	buf := make([]byte, 64<<10)
	for {
		n, err := up.Read(buf)
		if err != nil {
			return
		}
		// One script reply only: arrays. A new connection's HELLO reply
		// (a map) passes.
		if buf[0] == '*' {
			time.Sleep(time.Duration(delay.Swap(0)))
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestLostReplyIsNotRetried: go-redis retries timed-out commands by default
// (MaxRetries 3 here, deliberately left at the default); a script whose
// reply was lost has charged its hits, so a retry would charge them again.
// The store's commands opt out of retries: one call charges once.
func TestLostReplyIsNotRetried(t *testing.T) {
	t.Parallel()
	srv, direct := standalone(t)
	var delay atomic.Int64
	client := redis.NewClient(&redis.Options{
		Addr:        slowReplies(t, srv.Addr, &delay),
		ReadTimeout: 50 * time.Millisecond,
		PoolSize:    1,
	})
	t.Cleanup(func() { client.Close() })
	s := newStore(t, client)
	l := limitFor(ratelimit.FixedWindow, 100, time.Hour)
	key := randomKey(t)
	// Connect and load the script while replies still flow.
	if _, err := s.Allow(context.Background(), key+"warm-up", l, 1); err != nil {
		t.Fatal(err)
	}
	delay.Store(int64(300 * time.Millisecond))
	if _, err := s.Allow(context.Background(), key, l, 1); err == nil {
		t.Fatal("Allow succeeded although its reply was held past the read timeout: go-redis retried the script")
	}
	time.Sleep(time.Second) // let every forwarded command reach Redis
	count, err := direct.HGet(context.Background(), stateKey(DefaultPrefix, tagIdentity(key), l), fieldCount).Result()
	if err != nil || count != "1" {
		t.Fatalf("hits charged: %q, %v; want exactly 1", count, err)
	}
}
