package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const (
	// recvWindow is the connection-level receive window: HTTP/2's initial
	// 64 KiB, credited back once half of it is consumed.
	recvWindow = 65535
	// streamRecvWindow is the stream-level receive window we advertise, so a
	// stream never needs credit: responses are small and streams short.
	streamRecvWindow = math.MaxInt32
	// maxStreamID is the last client stream id HTTP/2 allows.
	maxStreamID = math.MaxInt32
)

// h2conn is one HTTP/2 connection carrying unary gRPC calls. Callers append
// their frames to a shared buffer under mu; one goroutine writes whatever
// accumulated with one Write (so, under load, many requests share a
// syscall, as Envoy's event loop does), and one goroutine reads.
type h2conn struct {
	nc   net.Conn
	wake chan struct{} // a write is pending; capacity 1
	done chan struct{} // closed when the read loop ends
	wg   sync.WaitGroup

	mu         sync.Mutex
	pend       frameBuf      // frames not yet written
	out        *http2.Framer // writes into pend
	streams    map[uint32]*h2stream
	nextID     uint32
	sendWin    int64  // connection-level send window
	streamWin  int64  // the server's initial stream-level window
	maxStreams uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS; 0 until its SETTINGS
	settled    bool   // the server's first SETTINGS arrived
	recvUsed   uint32 // DATA bytes received and not yet credited back
	credit     chan struct{}
	err        error // set once no new stream may start

	dec *hpack.Decoder // the server's header blocks, in order; read loop only
	blk headerBlock    // the block being decoded; read loop only
}

// headerBlock is what a response's header block (headers, trailers, or
// both for a trailers-only response) says.
type headerBlock struct {
	httpStatus string
	grpcStatus int // -1: absent
	grpcMsg    string
	endStream  bool
}

// frameBuf is the writer the frames are appended to.
type frameBuf struct{ b []byte }

func (f *frameBuf) Write(p []byte) (int, error) {
	f.b = append(f.b, p...)
	return len(p), nil
}

// h2stream is one call's state, reused across calls; the read loop fills it
// while it is in streams.
type h2stream struct {
	id         uint32
	httpStatus string
	grpcStatus int // -1 until a grpc-status arrives
	grpcMsg    string
	body       []byte // DATA payload
	err        error  // stream or connection failure
	canceled   bool   // the server reset the stream with CANCEL
	done       chan struct{}
}

func newH2Stream() *h2stream { return &h2stream{done: make(chan struct{}, 1)} }

// dialH2 connects (within ctx) and starts the connection's loops. A connection that
// cannot be made is returned failed, so calls over it fail as grpc-go's do.
func dialH2(ctx context.Context, addr string) *h2conn {
	c := &h2conn{
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		streams:   make(map[uint32]*h2stream),
		nextID:    1,
		sendWin:   65535,
		streamWin: 65535,
	}
	c.out = http2.NewFramer(&c.pend, nil)
	nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		c.err = fmt.Errorf("dial %s: %w", addr, err)
		close(c.done)
		return c
	}
	c.nc = nc
	c.pend.b = append(c.pend.b, http2.ClientPreface...)
	_ = c.out.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamRecvWindow})
	c.kick()
	fr := http2.NewFramer(nil, bufio.NewReaderSize(nc, 64<<10)) // one read for many frames
	c.dec = hpack.NewDecoder(4096, c.onField)
	fr.SetReuseFrames()
	c.wg.Add(2)
	go c.readLoop(fr)
	go c.writeLoop()
	return c
}

// close ends the connection and waits for its loops.
func (c *h2conn) close() {
	if c.nc != nil {
		_ = c.nc.Close()
	}
	c.wg.Wait()
}

// kick wakes the write loop; mu is held.
func (c *h2conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// grant wakes callers waiting for window or a stream slot; mu is held.
func (c *h2conn) grant() {
	if c.credit != nil {
		close(c.credit)
		c.credit = nil
	}
}

func (c *h2conn) writeLoop() {
	defer c.wg.Done()
	var spare []byte
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		// Let the callers the read loop just woke append their requests
		// first, so one write carries them all.
		runtime.Gosched()
		c.mu.Lock()
		buf := c.pend.b
		c.pend.b = spare[:0]
		c.mu.Unlock()
		if _, err := c.nc.Write(buf); err != nil {
			_ = c.nc.Close() // the read loop fails the calls
			return
		}
		spare = buf
	}
}

func (c *h2conn) readLoop(fr *http2.Framer) {
	defer c.wg.Done()
	defer close(c.done)
	for {
		f, err := fr.ReadFrame()
		if err == nil {
			err = c.handle(f)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			c.mu.Lock()
			c.fail(fmt.Errorf("connection: %w", err), 0)
			c.mu.Unlock()
			_ = c.nc.Close()
			return
		}
	}
}

func (c *h2conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		c.blk = headerBlock{grpcStatus: -1, endStream: f.StreamEnded()}
		return c.onHeaderFragment(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame: // the Framer checks it follows its HEADERS
		return c.onHeaderFragment(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch f := f.(type) {
	case *http2.DataFrame:
		c.onData(f)
	case *http2.RSTStreamFrame:
		if s := c.streams[f.StreamID]; s != nil {
			s.err = fmt.Errorf("stream reset by the server: %s", f.ErrCode)
			s.canceled = f.ErrCode == http2.ErrCodeCancel
			c.complete(s)
		}
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.out.WritePing(true, f.Data)
			c.kick()
		}
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.GoAwayFrame:
		c.fail(fmt.Errorf("server sent GOAWAY %s %q", f.ErrCode, f.DebugData()), f.LastStreamID)
	}
	return nil
}

// onHeaderFragment decodes a header block fragment outside the lock (the
// decoder is the read loop's) and, at the block's end, hands what it said
// to its stream. Every block is decoded, a dropped call's too: the server
// indexes fields in the dynamic table they share.
func (c *h2conn) onHeaderFragment(id uint32, frag []byte, end bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return err
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.streams[id]
	if s == nil {
		return nil // a call that timed out
	}
	if c.blk.httpStatus != "" {
		s.httpStatus = c.blk.httpStatus
	}
	if c.blk.grpcStatus >= 0 {
		s.grpcStatus, s.grpcMsg = c.blk.grpcStatus, c.blk.grpcMsg
	}
	if c.blk.endStream {
		c.complete(s)
	}
	return nil
}

// onField notes the fields a call's outcome depends on.
func (c *h2conn) onField(f hpack.HeaderField) {
	switch f.Name {
	case ":status":
		c.blk.httpStatus = f.Value
	case "grpc-status":
		if n, err := strconv.Atoi(f.Value); err == nil {
			c.blk.grpcStatus = n
		}
	case "grpc-message":
		c.blk.grpcMsg = f.Value
	}
}

// onData collects a response's message and credits the connection window
// back once half of it is used (streams never need credit).
func (c *h2conn) onData(f *http2.DataFrame) {
	c.recvUsed += f.Length
	if c.recvUsed >= recvWindow/2 {
		_ = c.out.WriteWindowUpdate(0, c.recvUsed)
		c.recvUsed = 0
		c.kick()
	}
	if s := c.streams[f.StreamID]; s != nil {
		s.body = append(s.body, f.Data()...)
		if f.StreamEnded() {
			c.complete(s)
		}
	}
}

func (c *h2conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if !c.settled { // no limit unless the server's first SETTINGS sets one
		c.settled, c.maxStreams = true, math.MaxUint32
	}
	err := f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.streamWin = int64(s.Val)
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		case http2.SettingHeaderTableSize:
			if s.Val < 4096 { // requestBlocks index fields in a table of HPACK's default size
				return fmt.Errorf("the server's SETTINGS_HEADER_TABLE_SIZE of %d is below the 4096 bytes the h2 client's header blocks assume", s.Val)
			}
		}
		return nil
	})
	_ = c.out.WriteSettingsAck()
	c.kick()
	c.grant()
	return err
}

// onWindowUpdate adds send credit. Stream-level updates need no book:
// a request is sent whole when its stream opens, within the initial window.
func (c *h2conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID != 0 {
		return nil
	}
	c.sendWin += int64(f.Increment)
	if c.sendWin > math.MaxInt32 {
		return errors.New("connection send window overflow")
	}
	c.grant()
	return nil
}

// fail stops new streams and fails the open ones above last, the last
// stream the server will still answer (0: all of them); mu is held.
func (c *h2conn) fail(err error, last uint32) {
	if c.err == nil {
		c.err = err
	}
	for id, s := range c.streams {
		if id > last || last == 0 {
			s.err = err
			c.complete(s)
		}
	}
	c.grant()
}

// complete hands a finished stream back to its caller; mu is held.
func (c *h2conn) complete(s *h2stream) {
	delete(c.streams, s.id)
	c.grant()
	s.done <- struct{}{}
}
