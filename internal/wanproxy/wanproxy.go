// Package wanproxy stands for a WAN in tests: a TCP proxy that delays,
// counts and can partition what crosses it.
package wanproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy stands for the WAN between a region and a global store: it forwards
// TCP to target with a one-way delay on every chunk (order kept), counts the
// bytes crossing it, and can partition: while Cut, it forwards nothing
// either way and new connections hang (a black hole, as a real partition
// looks to a client, which then times out).
type Proxy struct {
	// Addr is the proxy's loopback address.
	Addr string
	// Cut partitions while set.
	Cut atomic.Bool
	// Bytes counts what crossed, both directions.
	Bytes  atomic.Int64
	target string
	delay  time.Duration
	ln     net.Listener
	mu     sync.Mutex
	conns  []net.Conn
}

// New starts a proxy to target delaying each way by delay; it stops when
// the test ends.
func New(t testing.TB, target string, delay time.Duration) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, delay: delay, ln: ln}
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go p.serve(c)
	}
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *Proxy) serve(c net.Conn) {
	for p.Cut.Load() { // a partition: the connection goes nowhere
		time.Sleep(10 * time.Millisecond)
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(up)
	go p.pipe(up, c)
	p.pipe(c, up)
}

// pipe copies src to dst, each chunk delayed, dropped while cut.
func (p *Proxy) pipe(src, dst net.Conn) {
	type chunk struct {
		at   time.Time
		data []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		for ch := range q {
			time.Sleep(time.Until(ch.at))
			if _, err := dst.Write(ch.data); err != nil {
				return
			}
		}
	}()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.Cut.Load() {
			p.Bytes.Add(int64(n))
			q <- chunk{at: time.Now().Add(p.delay), data: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if err != io.EOF {
				_ = dst.Close()
			}
			return
		}
	}
}
