package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the default codec Marshal delegates to
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Codec is a gRPC codec for the servers of this package that decodes proto3
// string fields holding invalid UTF-8 instead of rejecting the message.
//
// Envoy copies raw header bytes into string fields (descriptor values, the
// ext_authz header map, ...), and grpc-go's default codec fails such a call
// before any handler runs; Envoy's filters then usually fail open, so one
// header a client controls would switch off every limit of its request.
// Install it with grpc.ForceServerCodecV2(envoy.NewCodec()).
//
// A string field that is not valid UTF-8, or that holds Escape, is rewritten
// before decoding: every byte outside a valid UTF-8 sequence becomes Escape
// followed by two upper-case hex digits, and a literal Escape becomes two.
// Valid strings without Escape are left as they are. The rewrite is
// injective: a rewritten string always holds Escape and an untouched one
// never does, and reading Escape-pairs back gives the original bytes; so two
// different raw values never decode to the same string (and never share a
// counter key). Marshalling is the default proto codec's.
type Codec struct {
	marshal encoding.CodecV2
}

// Escape is the rune that marks a rewritten byte: U+FDD0, a Unicode
// noncharacter, reserved for exactly this kind of internal use, so real
// traffic practically never carries it (and when it does it is escaped).
const Escape = '\uFDD0'

// maxRewriteDepth bounds the nesting the rewrite walks, as proto.Unmarshal
// bounds its own recursion; deeper input is left to proto.Unmarshal's error.
const maxRewriteDepth = 10000

var escapeBytes = []byte(string(Escape))

var _ encoding.CodecV2 = (*Codec)(nil)

// NewCodec returns the codec.
func NewCodec() *Codec {
	return &Codec{marshal: encoding.GetCodecV2("proto")}
}

// Name is "proto": the codec speaks the same wire format.
func (c *Codec) Name() string { return "proto" }

// Marshal encodes v with the default proto codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) { return c.marshal.Marshal(v) }

// Unmarshal decodes data into v, rewriting invalid UTF-8 as described on
// Codec.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("envoy codec: message is %T, want proto.Message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return UnmarshalLenient(buf.ReadOnlyData(), m)
}

// UnmarshalLenient decodes b into m as Codec does.
func UnmarshalLenient(b []byte, m proto.Message) error {
	// A literal Escape must be escaped too, or a valid string could equal
	// the rewrite of an invalid one; the scan is a fast byte search.
	if !bytes.Contains(b, escapeBytes) {
		err := proto.Unmarshal(b, m)
		if err == nil {
			return nil
		}
		// Any other decode error fails again below, with its own message.
	}
	fixed, err := rewriteMessage(nil, b, m.ProtoReflect().Descriptor(), 0)
	if err != nil {
		return proto.Unmarshal(b, m) // report proto's own error
	}
	return proto.Unmarshal(fixed, m)
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}

var errMalformed = errors.New("malformed wire data")

// rewriteMessage appends b, a message of type md, to out with every string
// field made valid UTF-8, recursing into message fields (map entries
// included). Unknown fields and non-string scalars are copied unchanged.
func rewriteMessage(out, b []byte, md protoreflect.MessageDescriptor, depth int) ([]byte, error) {
	if depth > maxRewriteDepth {
		return nil, errMalformed
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, errMalformed
		}
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return nil, errMalformed
			}
			out = append(out, b[:n+m]...)
			b = b[n+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return nil, errMalformed
		}
		out = protowire.AppendTag(out, num, typ)
		var err error
		out, err = rewriteField(out, v, fd, depth)
		if err != nil {
			return nil, err
		}
		b = b[n+m:]
	}
	return out, nil
}

// rewriteField appends one length-delimited field value, rewritten.
func rewriteField(out, v []byte, fd protoreflect.FieldDescriptor, depth int) ([]byte, error) {
	switch {
	case fd.Kind() == protoreflect.StringKind && needsRewrite(v):
		return protowire.AppendBytes(out, escapeInvalid(v)), nil
	case fd.Kind() == protoreflect.MessageKind:
		inner, err := rewriteMessage(nil, v, fd.Message(), depth+1)
		if err != nil {
			return nil, err
		}
		return protowire.AppendBytes(out, inner), nil
	}
	// bytes, valid strings, and packed repeated scalars.
	return protowire.AppendBytes(out, v), nil
}

func needsRewrite(v []byte) bool {
	return !utf8.Valid(v) || bytes.Contains(v, escapeBytes)
}

// escapeInvalid is the injective rewrite described on Codec.
func escapeInvalid(v []byte) []byte {
	const hexDigits = "0123456789ABCDEF"
	out := make([]byte, 0, len(v)+8)
	for i := 0; i < len(v); {
		r, size := utf8.DecodeRune(v[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out = append(out, escapeBytes...)
			out = append(out, hexDigits[v[i]>>4], hexDigits[v[i]&15])
		case r == Escape:
			out = append(out, escapeBytes...)
			out = append(out, escapeBytes...)
		default:
			out = append(out, v[i:i+size]...)
		}
		i += size
	}
	return out
}
