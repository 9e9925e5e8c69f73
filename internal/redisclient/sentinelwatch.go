package redisclient

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelWatchEvery is how often the watchdog asks a sentinel for the
// master's address.
const sentinelWatchEvery = time.Second

// masterConns wraps the failover client's dialer and remembers the
// connections it opened to a master, so that the watchdog can close the
// ones to a master the sentinels no longer name.
//
// Why: go-redis drops its connections to the old master when a sentinel's
// +switch-master message reaches it, but it listens on one sentinel's
// pub/sub and drops that subscription when a sentinel query times out: a
// missed message leaves every pooled connection on the old master, which
// keeps accepting writes until it is demoted (about ten seconds), and
// those writes are lost when it resyncs. Every new dial asks the sentinels
// afresh, so closing the stale connections is enough to move the client.
type masterConns struct {
	mu        sync.Mutex
	conns     map[*trackedConn]struct{}
	sentinels map[string]bool // dials to these are the sentinels', not tracked
	dialer    *net.Dialer
	tls       *tls.Config // nil: plaintext
}

func newMasterConns(sentinelAddrs []string, dialTimeout time.Duration, tlsConf *tls.Config) *masterConns {
	m := &masterConns{conns: map[*trackedConn]struct{}{}, sentinels: map[string]bool{}, tls: tlsConf,
		dialer: &net.Dialer{Timeout: dialTimeout, KeepAlive: 5 * time.Minute}}
	for _, a := range sentinelAddrs {
		m.sentinels[a] = true
	}
	return m
}

// Dialer is the failover client's (and its sentinel clients') dialer. A
// custom dialer replaces go-redis's own, TLS included, so it does TLS as
// go-redis would: verifying the host it dials.
func (m *masterConns) Dialer(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := m.dialer.DialContext(ctx, network, addr)
	if err == nil && m.tls != nil {
		c, err = m.handshake(ctx, c, addr)
	}
	if err != nil || m.sentinels[addr] {
		return c, err
	}
	tc := &trackedConn{Conn: c, addr: addr, owner: m}
	m.mu.Lock()
	m.conns[tc] = struct{}{}
	m.mu.Unlock()
	return tc, nil
}

func (m *masterConns) handshake(ctx context.Context, c net.Conn, addr string) (net.Conn, error) {
	conf := m.tls.Clone()
	if conf.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		conf.ServerName = host
	}
	tc := tls.Client(c, conf)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// closeOthers closes every tracked connection not to master and returns
// how many it closed.
func (m *masterConns) closeOthers(master string) int {
	m.mu.Lock()
	var stale []*trackedConn
	for c := range m.conns {
		if c.addr != master {
			stale = append(stale, c)
		}
	}
	m.mu.Unlock()
	for _, c := range stale {
		_ = c.Close()
	}
	return len(stale)
}

// trackedConn is a master connection that leaves the set when closed.
type trackedConn struct {
	net.Conn
	addr  string
	owner *masterConns
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

// watchSentinels asks the sentinels for the master every
// sentinelWatchEvery and closes the client's connections to any other
// address, until the client is closed.
func watchSentinels(client *redis.Client, o *redis.FailoverOptions, conns *masterConns) {
	sentinel := func(i int) *redis.SentinelClient {
		return redis.NewSentinelClient(&redis.Options{
			Addr: o.SentinelAddrs[i], Password: o.SentinelPassword, Dialer: conns.Dialer,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, MaxRetries: -1,
		})
	}
	sc := sentinel(0)
	defer func() { _ = sc.Close() }()
	next := 0
	for range time.Tick(sentinelWatchEvery) {
		if errors.Is(client.Ping(context.Background()).Err(), redis.ErrClosed) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), sentinelWatchEvery)
		addr, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
		cancel()
		if err != nil || len(addr) != 2 {
			// Ask the next sentinel from now on.
			next = (next + 1) % len(o.SentinelAddrs)
			_ = sc.Close()
			sc = sentinel(next)
			continue
		}
		conns.closeOthers(net.JoinHostPort(addr[0], addr[1]))
	}
}
