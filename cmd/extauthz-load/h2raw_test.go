package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// rawServer is a hand-written HTTP/2 server for what grpc-go's server does
// not do on demand: it splits every header block over HEADERS and
// CONTINUATION frames, indexes a new field (x-seq) in every block, so a
// client that skips decoding one block misreads every later one, and
// answers a call to "k1" only after the client resets it (a late reply).
type rawServer struct {
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	seq  int
	keys map[uint32]string

	answered, late atomic.Int64 // replies to "k0"; late replies to "k1"
}

func serveRaw(t *testing.T) (string, *rawServer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	s := &rawServer{keys: make(map[uint32]string)}
	s.enc = hpack.NewEncoder(&s.hbuf)
	go func() {
		nc, err := lis.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		_ = s.serve(nc)
	}()
	return lis.Addr().String(), s
}

func (s *rawServer) serve(nc net.Conn) error {
	if _, err := io.ReadFull(nc, make([]byte, len(http2.ClientPreface))); err != nil {
		return err
	}
	s.fr = http2.NewFramer(nc, nc)
	s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := s.fr.WriteSettings(); err != nil {
		return err
	}
	for {
		f, err := s.fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = s.fr.WriteSettingsAck()
			}
		case *http2.DataFrame:
			err = s.onRequest(f)
		case *http2.RSTStreamFrame:
			if s.keys[f.StreamID] == "k1" {
				s.late.Add(1)
				err = s.reply(f.StreamID)
			}
		}
		if err != nil {
			return err
		}
	}
}

// onRequest answers a request when its DATA ends it, except for "k1".
func (s *rawServer) onRequest(f *http2.DataFrame) error {
	if err := s.fr.WriteWindowUpdate(0, f.Length); err != nil || !f.StreamEnded() {
		return err
	}
	var req rlsv3.RateLimitRequest
	if err := proto.Unmarshal(f.Data()[5:], &req); err != nil {
		return err
	}
	key := req.GetDescriptors()[0].GetEntries()[0].GetValue()
	s.keys[f.StreamID] = key
	if key == "k1" {
		return nil
	}
	s.answered.Add(1)
	return s.reply(f.StreamID)
}

// reply sends headers, an OK message and trailers.
func (s *rawServer) reply(id uint32) error {
	msg, err := proto.Marshal(&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK})
	if err != nil {
		return err
	}
	if err := s.headers(id, false, ":status", "200", "content-type", "application/grpc"); err != nil {
		return err
	}
	if err := s.fr.WriteData(id, false, binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))); err != nil {
		return err
	}
	if err := s.fr.WriteData(id, false, msg); err != nil {
		return err
	}
	return s.headers(id, true, "grpc-status", "0")
}

// headers writes one header block, plus a new indexed x-seq field, in three
// pieces: HEADERS and two CONTINUATIONs.
func (s *rawServer) headers(id uint32, end bool, kv ...string) error {
	s.hbuf.Reset()
	s.seq++
	kv = append(kv, "x-seq", strconv.Itoa(s.seq))
	for i := 0; i < len(kv); i += 2 {
		if err := s.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]}); err != nil {
			return err
		}
	}
	b := s.hbuf.Bytes()
	a, c := len(b)/3, 2*len(b)/3
	if err := s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:a], EndStream: end}); err != nil {
		return err
	}
	if err := s.fr.WriteContinuation(id, false, b[a:c]); err != nil {
		return err
	}
	return s.fr.WriteContinuation(id, true, b[c:])
}

// TestH2HeaderBlocks: header blocks split over CONTINUATION frames decode,
// a late reply to a timed-out call is dropped and its header block still
// decoded, so every later reply still reads right: every "k0" call the
// server answered is counted OK, and the only errors are deadlines.
func TestH2HeaderBlocks(t *testing.T) {
	t.Parallel()
	addr, s := serveRaw(t)
	r := runJSON(t, "-client", clientH2, "-addr", addr, "-keys", "2", "-concurrency", "2",
		"-duration", "500ms", "-timeout", "100ms")
	if s.late.Load() == 0 || r.OK == 0 || r.OK != s.answered.Load() {
		t.Fatalf("report %+v after %d late replies, want all %d answered calls OK", r, s.late.Load(), s.answered.Load())
	}
	if r.Errors == 0 || !strings.Contains(r.FirstErr, "DeadlineExceeded") {
		t.Fatalf("report %+v, want deadline errors for k1", r)
	}
}

// TestServerResetAtTheDeadlineIsTheDeadline: grpc-go's server resets a call
// with CANCEL when its grpc-timeout passes, and on a busy machine that reset
// can be read before the client's own timer fires (TestCallTimeout/h2 once
// reported "Unavailable: stream reset by the server: CANCEL"). Past the
// call's deadline such a reset is DeadlineExceeded; before it, or any other
// reset, stays the stream's own error.
func TestServerResetAtTheDeadlineIsTheDeadline(t *testing.T) {
	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	defer cancel()
	future, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		canceled bool
		want     codes.Code
	}{
		{"CANCEL past the deadline", past, true, codes.DeadlineExceeded},
		{"CANCEL before the deadline", future, true, codes.OK},
		{"another reset past the deadline", past, false, codes.OK},
		{"CANCEL without a deadline", context.Background(), true, codes.OK},
	} {
		s := newH2Stream()
		s.canceled = tc.canceled
		if got := status.Code(ended(tc.ctx, s)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
