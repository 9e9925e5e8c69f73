package redisclient

import (
	"context"
	"net"
	"testing"
	"time"
)

// TestCloseOthersLeavesOnlyTheNamedMaster: the watchdog's clean-up closes
// the connections to every address but the master the sentinels name, and
// never a sentinel's.
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
	m := newMasterConns([]string{sentinel}, time.Second, nil)
	dial := func(addr string) net.Conn {
		c, err := m.Dialer(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	stale := []net.Conn{dial(oldMaster), dial(oldMaster)}
	live, sent := dial(newMaster), dial(sentinel)
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
