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

// masterConns remembers the failover client's connections to a master, so
// that the watchdog can close the ones to a master the sentinels no longer
// name.
//
// Why: go-redis drops its connections to the old master when a sentinel's
// +switch-master message reaches it, but it listens on one sentinel's
// pub/sub and drops that subscription when a sentinel query times out: a
// missed message leaves every pooled connection on the old master, which
// keeps accepting writes until it is demoted (about ten seconds), and
// those writes are lost when it resyncs. Every new dial asks the sentinels
// afresh, so closing the stale connections is enough to move the client.
//
// Which connections are a master's: Dialer serves the failover client and
// every sentinel client go-redis builds, the sentinels it discovered
// included (their addresses are in no list of ours), so the dial itself
// cannot tell. The failover client's own dial hook can: only the client's
// pools dial through it (see DialHook), and only those are tracked.
type masterConns struct {
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	dialer *net.Dialer
	tls    *tls.Config // nil: plaintext
}

var _ redis.Hook = (*masterConns)(nil)

func newMasterConns(dialTimeout time.Duration, tlsConf *tls.Config) *masterConns {
	return &masterConns{conns: map[*trackedConn]struct{}{}, tls: tlsConf,
		dialer: &net.Dialer{Timeout: dialTimeout, KeepAlive: 5 * time.Minute}}
}

// Dialer is the failover client's (and its sentinel clients') dialer. A
// custom dialer replaces go-redis's own, TLS included, so it does TLS as
// go-redis would: verifying the host it dials. It wraps each connection
// so that DialHook can track it by the address dialled.
func (m *masterConns) Dialer(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := m.dialer.DialContext(ctx, network, addr)
	if err == nil && m.tls != nil {
		c, err = m.handshake(ctx, c, addr)
	}
	if err != nil {
		return nil, err
	}
	return &trackedConn{Conn: c, addr: addr, owner: m}, nil
}

// DialHook tracks the connections the failover client's pools dial: those
// go to the master go-redis just asked the sentinels for. Added to the
// failover client only, it never sees a sentinel client's dial.
func (m *masterConns) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if tc, ok := c.(*trackedConn); ok && err == nil {
			m.track(tc)
		}
		return c, err
	}
}

// ProcessHook leaves commands alone.
func (m *masterConns) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook leaves pipelines alone.
func (m *masterConns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (m *masterConns) track(c *trackedConn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !c.closed {
		m.conns[c] = struct{}{}
	}
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

// trackedConn is a connection that leaves the set of tracked ones when
// closed.
type trackedConn struct {
	net.Conn
	addr   string
	owner  *masterConns
	closed bool // under owner.mu: a closed connection is never tracked
}

func (c *trackedConn) Close() error {
	c.owner.mu.Lock()
	c.closed = true
	delete(c.owner.conns, c)
	c.owner.mu.Unlock()
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
