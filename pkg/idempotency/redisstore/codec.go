package redisstore

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// encodeHeaders writes headers as a count followed by length-prefixed names
// and values: binary-safe (values may hold obs-text) and unambiguous.
func encodeHeaders(hs []idempotency.Header) []byte {
	b := binary.AppendUvarint(nil, uint64(len(hs)))
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.Name)))
		b = append(b, h.Name...)
		b = binary.AppendUvarint(b, uint64(len(h.Value)))
		b = append(b, h.Value...)
	}
	return b
}

// decodeHeaders reads what encodeHeaders wrote, checking every length.
func decodeHeaders(b []byte) ([]idempotency.Header, error) {
	n, b, err := uvarint(b)
	if err != nil || n > idempotency.MaxReplayHeaders {
		return nil, fmt.Errorf("%w: header count", ErrUnexpectedReply)
	}
	hs := make([]idempotency.Header, 0, n)
	for range n {
		var name, value string
		if name, b, err = lengthPrefixed(b); err != nil {
			return nil, err
		}
		if value, b, err = lengthPrefixed(b); err != nil {
			return nil, err
		}
		hs = append(hs, idempotency.Header{Name: name, Value: value})
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: trailing header bytes", ErrUnexpectedReply)
	}
	return hs, nil
}

func uvarint(b []byte) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad length", ErrUnexpectedReply)
	}
	return v, b[n:], nil
}

func lengthPrefixed(b []byte) (string, []byte, error) {
	n, b, err := uvarint(b)
	if err != nil || n > uint64(len(b)) {
		return "", nil, fmt.Errorf("%w: truncated header", ErrUnexpectedReply)
	}
	return string(b[:n]), b[n:], nil
}

// encodeBody gzips body when it is at least threshold bytes long (threshold
// < 0 never) and gzip makes it smaller; it returns the encoding used.
func encodeBody(body []byte, threshold int) (string, []byte) {
	if threshold < 0 || len(body) < threshold {
		return encIdentity, body
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // valid level: no error
	if _, err := zw.Write(body); err != nil {
		return encIdentity, body
	}
	if err := zw.Close(); err != nil || buf.Len() >= len(body) {
		return encIdentity, body
	}
	return encGzip, buf.Bytes()
}

// decodeBody undoes encodeBody, refusing to inflate past maxBody (<= 0: no cap).
func decodeBody(enc string, data []byte, maxBody int64) ([]byte, error) {
	switch enc {
	case encIdentity:
		return data, nil
	case encGzip:
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip body: %w", ErrUnexpectedReply, err)
		}
		var r io.Reader = zr
		if maxBody > 0 {
			r = io.LimitReader(zr, maxBody+1)
		}
		body, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip body: %w", ErrUnexpectedReply, err)
		}
		if maxBody > 0 && int64(len(body)) > maxBody {
			return nil, fmt.Errorf("%w: body inflates past %d bytes", ErrUnexpectedReply, maxBody)
		}
		return body, nil
	}
	return nil, fmt.Errorf("%w: body encoding %q", ErrUnexpectedReply, enc)
}

// encodeRef writes a body reference as length-prefixed name, size and
// SHA-256; nil (an inline body) is empty.
func encodeRef(r *blob.Ref) []byte {
	if r == nil {
		return nil
	}
	b := binary.AppendUvarint(nil, uint64(len(r.Name)))
	b = append(b, r.Name...)
	b = binary.AppendUvarint(b, uint64(r.Size))
	b = binary.AppendUvarint(b, uint64(len(r.SHA256)))
	return append(b, r.SHA256...)
}

// decodeRef reads what encodeRef wrote; empty is no reference.
func decodeRef(b []byte) (*blob.Ref, error) {
	if len(b) == 0 {
		return nil, nil
	}
	name, b, err := lengthPrefixed(b)
	if err != nil {
		return nil, err
	}
	size, b, err := uvarint(b)
	if err != nil || size > math.MaxInt64 {
		return nil, fmt.Errorf("%w: body reference size", ErrUnexpectedReply)
	}
	sum, b, err := lengthPrefixed(b)
	if err != nil || len(b) != 0 {
		return nil, fmt.Errorf("%w: body reference", ErrUnexpectedReply)
	}
	return &blob.Ref{Name: name, Size: int64(size), SHA256: sum}, nil
}

// digest identifies a completed record's content (complete.lua's ARGV[3..8]),
// so that a re-sent Complete is told apart from a different one.
func digest(fields ...[]byte) string {
	h := sha256.New()
	for _, f := range fields {
		var n [binary.MaxVarintLen64]byte
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(f)))])
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}
