package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// gRPC method paths the h2 client calls.
const (
	pathShouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	pathCheck           = "/envoy.service.auth.v3.Authorization/Check"
)

// newH2Caller opens the h2 client's connection and returns the -api's
// caller over it: the same requests as the grpc client's, encoded once.
func newH2Caller(cfg config) (caller, func(), error) {
	path, decode := pathShouldRateLimit, decodeRLS
	var bodies [][]byte
	var err error
	if cfg.api == apiAuthz {
		path, decode = pathCheck, decodeCheck
		bodies, err = grpcFrames(buildCheckRequests(cfg))
	} else {
		bodies, err = grpcFrames(buildRequests(cfg))
	}
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	c := dialH2(ctx, cfg.addr)
	return h2Caller(c, requestHeaders(path, cfg.addr, cfg.timeout), bodies, decode), c.close, nil
}

// grpcFrames marshals each request behind gRPC's 5-byte message prefix
// (uncompressed, big-endian length), each to go in one DATA frame.
func grpcFrames[M proto.Message](msgs []M) ([][]byte, error) {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, err
		}
		if len(b)+5 > 16384 { // the smallest SETTINGS_MAX_FRAME_SIZE a server may set
			return nil, fmt.Errorf("request %d: %d bytes do not fit one DATA frame", i, len(b))
		}
		out[i] = binary.BigEndian.AppendUint32(append(make([]byte, 0, 5+len(b)), 0), uint32(len(b)))
		out[i] = append(out[i], b...)
	}
	return out, nil
}

// requestBlocks are a call's header block encoded once, as Envoy 1.40's
// gRPC client encodes it (observed on the wire from its rate limit
// filter): :method and :scheme from HPACK's static table, :path a literal
// that is never added to the table (Huffman-coded, decoded again by the
// server on every call), and every other field added to the dynamic table
// by the first call and indexed (one byte each) by the calls after it.
// The server's table then never changes after the first block, so steady
// is valid on every later stream of the connection.
type requestBlocks struct {
	first, steady []byte
}

// requestHeaders encodes the fields Envoy sends to a gRPC service: its
// filter's timeout as grpc-timeout and x-envoy-expected-rq-timeout-ms, and
// the headers its async client adds for an internal call.
func requestHeaders(path, authority string, timeout time.Duration) requestBlocks {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	ms := strconv.FormatInt(min(max(timeout.Milliseconds(), 1), 99999999), 10) // grpc-timeout has 8 digits
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":path", Value: path, Sensitive: true},
		{Name: ":authority", Value: authority},
		{Name: ":scheme", Value: "http"},
		{Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: ms + "m"},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "x-envoy-internal", Value: "true"},
		{Name: "x-forwarded-for", Value: "127.0.0.1"},
		{Name: "x-envoy-expected-rq-timeout-ms", Value: ms},
	}
	encode := func() []byte {
		b.Reset()
		for _, f := range fields {
			_ = enc.WriteField(f)
		}
		return bytes.Clone(b.Bytes())
	}
	first := encode()
	return requestBlocks{first: first, steady: encode()}
}

// h2Caller makes call i with bodies[i%len] and decodes the response with
// decode. Stream states are pooled, so a call allocates little.
func h2Caller(c *h2conn, hdr requestBlocks, bodies [][]byte, decode func([]byte) (outcome, error)) caller {
	pool := sync.Pool{New: func() any { return newH2Stream() }}
	return func(ctx context.Context, i int) (outcome, error) {
		s := pool.Get().(*h2stream)
		defer pool.Put(s)
		if err := c.roundTrip(ctx, s, hdr, bodies[i%len(bodies)]); err != nil {
			return outcomeOther, err
		}
		msg, err := s.message()
		if err != nil {
			return outcomeOther, err
		}
		return decode(msg)
	}
}

// roundTrip sends one request on a new stream and waits for its end or
// ctx's. A call that times out is reset, and its late reply dropped.
func (c *h2conn) roundTrip(ctx context.Context, s *h2stream, hdr requestBlocks, body []byte) error {
	if err := c.open(ctx, s, hdr, body); err != nil {
		return err
	}
	select {
	case <-s.done:
		return ended(ctx, s)
	case <-ctx.Done():
	}
	c.mu.Lock()
	mine := c.streams[s.id] == s
	if mine {
		delete(c.streams, s.id)
		_ = c.out.WriteRSTStream(s.id, http2.ErrCodeCancel)
		c.kick()
		c.grant()
	}
	c.mu.Unlock()
	if !mine {
		<-s.done // the read loop completed it meanwhile
		return ended(ctx, s)
	}
	return status.Error(codes.DeadlineExceeded, ctx.Err().Error())
}

// ended is a completed stream's error of its own: grpc-go's server resets
// a call with CANCEL when its grpc-timeout passes, which can arrive before
// this side's timer fires (the server's deadline is never earlier than
// ours: it counts from when the request arrived). Past our deadline that
// reset is the deadline, as grpc-go's client reports it; anything else is
// left to the stream's message.
func ended(ctx context.Context, s *h2stream) error {
	if d, ok := ctx.Deadline(); s.canceled && ok && !time.Now().Before(d) {
		return status.Error(codes.DeadlineExceeded, "the server reset the stream at the call's deadline (grpc-timeout)")
	}
	return nil
}

// open starts s once the server's SETTINGS arrived and its windows and
// stream limit allow, with
// the stream id taken under the lock that orders the frames. Over a failed
// connection the call waits out its deadline, so a dead server does not
// turn the workers into a busy loop.
func (c *h2conn) open(ctx context.Context, s *h2stream, hdr requestBlocks, body []byte) error {
	for {
		c.mu.Lock()
		wait, err := c.tryOpen(s, hdr, body)
		c.mu.Unlock()
		if err != nil {
			<-ctx.Done()
			return status.Error(codes.Unavailable, err.Error())
		}
		if wait == nil {
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return status.Error(codes.DeadlineExceeded, "waiting for flow control: "+ctx.Err().Error())
		}
	}
}

// tryOpen appends s's HEADERS and DATA, or returns what to wait on; mu is held.
func (c *h2conn) tryOpen(s *h2stream, hdr requestBlocks, body []byte) (<-chan struct{}, error) {
	n := int64(len(body))
	switch {
	case c.err != nil:
		return nil, c.err
	case c.nextID > maxStreamID:
		return nil, errors.New("stream ids exhausted")
	case uint64(len(c.streams)) >= uint64(c.maxStreams) || c.sendWin < n || c.streamWin < n:
		if c.credit == nil {
			c.credit = make(chan struct{})
		}
		return c.credit, nil
	}
	*s = h2stream{id: c.nextID, grpcStatus: -1, body: s.body[:0], done: s.done}
	c.nextID += 2
	c.streams[s.id] = s
	c.sendWin -= n
	blk := hdr.steady
	if s.id == 1 { // the connection's first stream, whose frames leave first: it fills the table
		blk = hdr.first
	}
	_ = c.out.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: blk, EndHeaders: true})
	_ = c.out.WriteData(s.id, true, body)
	c.kick()
	return nil, nil
}

// message is the response's one message, or the call's error as a gRPC
// status, as grpc-go would report it.
func (s *h2stream) message() ([]byte, error) {
	switch {
	case s.err != nil:
		return nil, status.Error(codes.Unavailable, s.err.Error())
	case s.httpStatus != "200":
		return nil, status.Errorf(codes.Internal, "HTTP status %q", s.httpStatus)
	case s.grpcStatus < 0:
		return nil, status.Error(codes.Internal, "response without grpc-status")
	case s.grpcStatus != 0:
		msg, err := url.PathUnescape(s.grpcMsg) // gRPC percent-encodes the message
		if err != nil {
			msg = s.grpcMsg
		}
		return nil, status.Error(codes.Code(s.grpcStatus), msg)
	case len(s.body) < 5 || s.body[0] != 0 || int(binary.BigEndian.Uint32(s.body[1:5])) != len(s.body)-5:
		return nil, status.Errorf(codes.Internal, "response is not one uncompressed message (%d bytes)", len(s.body))
	}
	return s.body[5:], nil
}

// decodeRLS reads a RateLimitResponse's overall_code (field 1).
func decodeRLS(b []byte) (outcome, error) {
	code, err := varintField(b, 1)
	if err != nil {
		return outcomeOther, err
	}
	return rlsOutcome(rlsv3.RateLimitResponse_Code(code))
}

// decodeCheck reads a CheckResponse's status.code (1.1) and
// denied_response.status.code (2.1.1).
func decodeCheck(b []byte) (outcome, error) {
	st, err := messageField(b, 1)
	if err != nil {
		return outcomeOther, err
	}
	code, err := varintField(st, 1)
	if err != nil {
		return outcomeOther, err
	}
	denied, err := messageField(b, 2)
	if err == nil {
		denied, err = messageField(denied, 1)
	}
	var httpCode uint64
	if err == nil {
		httpCode, err = varintField(denied, 1)
	}
	if err != nil {
		return outcomeOther, err
	}
	return authzOutcome(codes.Code(int32(code)), int32(httpCode))
}

// varintField is the last value of varint field num in b, 0 if absent.
func varintField(b []byte, num protowire.Number) (uint64, error) {
	var v uint64
	err := scanFields(b, func(n protowire.Number, t protowire.Type, field []byte) {
		if n == num && t == protowire.VarintType {
			v, _ = protowire.ConsumeVarint(field)
		}
	})
	return v, err
}

// messageField is the last value of length-delimited field num in b.
func messageField(b []byte, num protowire.Number) ([]byte, error) {
	var v []byte
	err := scanFields(b, func(n protowire.Number, t protowire.Type, field []byte) {
		if n == num && t == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(field)
		}
	})
	return v, err
}

// scanFields calls fn with each field's number, type and encoded value.
func scanFields(b []byte, fn func(protowire.Number, protowire.Type, []byte)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("response: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("response: %w", protowire.ParseError(m))
		}
		fn(num, typ, b[n:n+m])
		b = b[n+m:]
	}
	return nil
}
