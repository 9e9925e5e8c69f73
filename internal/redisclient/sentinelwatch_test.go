package redisclient

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redistest"
)

// TestCloseOthersLeavesOnlyTheNamedMaster: the watchdog's clean-up closes
// the connections the failover client dialled to every address but the
// master the sentinels name, and never a sentinel client's.
func TestCloseOthersLeavesOnlyTheNamedMaster(t *testing.T) {
	t.Parallel()
	listen := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { _ = c.Close() })
			}
		}()
		return ln.Addr().String()
	}
	oldMaster, newMaster, sentinel := listen(), listen(), listen()
	m := newMasterConns(time.Second, nil)
	viaClient := m.DialHook(m.Dialer) // the failover client's dials; a sentinel client's call Dialer alone
	dialWith := func(d redis.DialHook, addr string) net.Conn {
		c, err := d(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dial := func(addr string) net.Conn { return dialWith(viaClient, addr) }
	stale := []net.Conn{dial(oldMaster), dial(oldMaster)}
	live, sent := dial(newMaster), dialWith(m.Dialer, sentinel)
	if n := m.closeOthers(newMaster); n != 2 {
		t.Fatalf("closed %d connections, want the 2 to the old master", n)
	}
	for _, c := range stale {
		if _, err := c.Write([]byte("PING\r\n")); err == nil {
			t.Error("a connection to the old master still writes")
		}
	}
	for _, c := range []net.Conn{live, sent} {
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			t.Errorf("a connection to %s was closed: %v", c.RemoteAddr(), err)
		}
	}
	if n := m.closeOthers(newMaster); n != 0 {
		t.Errorf("a second clean-up closed %d, want 0 (closed connections leave the set)", n)
	}
}

// TestWatchdogLeavesDiscoveredSentinelsAlone runs the watchdog loop against
// real sentinels: the client is given one sentinel, go-redis discovers the
// other two, and when the given one hangs it moves its +switch-master
// subscription to a discovered one. Once the given sentinel answers again
// the watchdog asks it every second; that subscription must survive those
// ticks, since it is go-redis's, not a connection to an old master.
func TestWatchdogLeavesDiscoveredSentinelsAlone(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinel(t)
	c, err := New(Options{URL: "redis://:" + redistest.SentinelDataPassword + "@/0?client_name=watched",
		SentinelAddrs: s.Addrs[:1], SentinelMaster: redistest.SentinelMaster,
		SentinelPassword: redistest.SentinelPassword, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // subscribes on sentinel 0, discovers 1 and 2
		t.Fatal(err)
	}
	master := s.Master()
	s.PauseSentinel(0)
	killClients(t, master.Client(), "name=watched") // the next dial asks the sentinels again
	waitPing(t, c)
	s.ResumeSentinel(0)
	time.Sleep(4 * sentinelWatchEvery) // the watchdog's ticks, which this test is about
	if idle, ok := clientIdle(t, s.Client(0), "get-master-addr-by-name"); !ok || idle > 2 {
		t.Fatalf("the watchdog has not asked sentinel 0 lately (found %v, idle %ds): the loop did not run", ok, idle)
	}
	age := -1
	for i := 1; i < len(s.Addrs); i++ {
		if a, ok := clientAge(t, s.Client(i), "TYPE", "pubsub"); ok && a > age {
			age = a
		}
	}
	if age < 0 {
		t.Fatal("no subscription on a discovered sentinel: go-redis did not move there")
	}
	// Subscribed before the resume, it has lived through the watchdog's
	// ticks since, unless one cut it (then it is at most a tick old).
	if age < 3 {
		t.Fatalf("the subscription on a discovered sentinel is %ds old, %s after the watchdog resumed: it was cut", age, 4*sentinelWatchEvery)
	}
}

// killClients closes the connections whose CLIENT LIST line has match.
func killClients(t *testing.T, c *redis.Client, match string) {
	t.Helper()
	ctx := context.Background()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " "+match+" ") {
			if err := c.ClientKillByFilter(ctx, "ID", field(line, "id")).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// waitPing waits until c answers PING again.
func waitPing(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the client does not answer 20s after its sentinel hung")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clientIdle returns the smallest idle time of the connections whose last
// command contains cmd.
func clientIdle(t *testing.T, c *redis.SentinelClient, cmd string) (int, bool) {
	t.Helper()
	best, ok := 0, false
	for _, line := range clientList(t, c) {
		if strings.Contains(field(line, "cmd"), cmd) {
			idle, _ := strconv.Atoi(field(line, "idle"))
			if !ok || idle < best {
				best, ok = idle, true
			}
		}
	}
	return best, ok
}

// clientAge returns the largest age of the connections CLIENT LIST filter
// lists.
func clientAge(t *testing.T, c *redis.SentinelClient, filter ...string) (int, bool) {
	t.Helper()
	best, ok := 0, false
	for _, line := range clientList(t, c, filter...) {
		age, _ := strconv.Atoi(field(line, "age"))
		if !ok || age > best {
			best, ok = age, true
		}
	}
	return best, ok
}

func clientList(t *testing.T, c *redis.SentinelClient, filter ...string) []string {
	t.Helper()
	args := []any{"CLIENT", "LIST"}
	for _, f := range filter {
		args = append(args, f)
	}
	cmd := redis.NewStringCmd(context.Background(), args...)
	if err := c.Process(context.Background(), cmd); err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(cmd.Val()), "\n")
}

// field returns the value of name= in a CLIENT LIST line.
func field(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}
