package redistest

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HoldingProxy forwards a client's connections to Redis nodes (set it as
// the client's Dialer). Once Hold is called it holds the next reply that
// long (past the client's read timeout: the command ran but its caller saw
// a timeout), and it keeps every request byte, so that a re-sent command
// shows in Sent. Tests of the no-retry rule use it.
type HoldingProxy struct {
	t     testing.TB
	delay atomic.Int64
	mu    sync.Mutex
	addrs map[string]string // node address → proxy address
	seen  bytes.Buffer      // every request byte forwarded
}

// NewHoldingProxy returns a proxy whose listeners close when t ends.
func NewHoldingProxy(t testing.TB) *HoldingProxy {
	return &HoldingProxy{t: t, addrs: map[string]string{}}
}

// Hold makes the next reply (of any connection) wait d.
func (p *HoldingProxy) Hold(d time.Duration) { p.delay.Store(int64(d)) }

// Dial is a go-redis Dialer that reaches addr through the proxy.
func (p *HoldingProxy) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	front, ok := p.addrs[addr]
	if !ok {
		front = p.listen(addr)
		p.addrs[addr] = front
	}
	p.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, front)
}

func (p *HoldingProxy) listen(addr string) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = lis.Close() })
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

func (p *HoldingProxy) serve(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	go p.forwardRequests(c, up)
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

func (p *HoldingProxy) forwardRequests(c, up net.Conn) {
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
}

// Sent counts the forwarded requests naming key.
func (p *HoldingProxy) Sent(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Count(p.seen.Bytes(), []byte(key))
}
