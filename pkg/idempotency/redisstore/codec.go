package redisstore

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/extauthz/extauthz/pkg/idempotency"
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
