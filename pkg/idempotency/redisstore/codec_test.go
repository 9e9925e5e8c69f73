package redisstore

import (
	"bytes"
	"testing"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// FuzzHeaderCodec: encoded headers decode back to themselves, and no input
// from Redis makes decodeHeaders panic.
func FuzzHeaderCodec(f *testing.F) {
	f.Add("content-type", "text/plain", "x-bin", "\x00\xff", []byte{1, 2})
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string, raw []byte) {
		hs := []idempotency.Header{{Name: n1, Value: v1}, {Name: n2, Value: v2}}
		got, err := decodeHeaders(encodeHeaders(hs))
		if err != nil || len(got) != 2 || got[0] != hs[0] || got[1] != hs[1] {
			t.Fatalf("round trip of %v = %v, %v", hs, got, err)
		}
		_, _ = decodeHeaders(raw)
	})
}

func TestBodyCodec(t *testing.T) {
	big := bytes.Repeat([]byte("abc"), 1000)
	for _, tc := range []struct {
		body      []byte
		threshold int
		enc       string
	}{
		{big, 1024, encGzip},
		{big, -1, encIdentity},
		{big[:100], 1024, encIdentity},
		{[]byte{0x1f, 0x8b, 0, 1, 2}, 1, encIdentity}, // gzip would not shrink it
	} {
		enc, data := encodeBody(tc.body, tc.threshold)
		if enc != tc.enc {
			t.Errorf("%d bytes, threshold %d: encoding %q, want %q", len(tc.body), tc.threshold, enc, tc.enc)
		}
		back, err := decodeBody(enc, data, 1<<20)
		if err != nil || !bytes.Equal(back, tc.body) {
			t.Errorf("round trip: %v", err)
		}
	}
	enc, data := encodeBody(big, 1)
	if _, err := decodeBody(enc, data, 100); err == nil {
		t.Error("decodeBody inflated past its cap")
	}
	if _, err := decodeBody("br", nil, 0); err == nil {
		t.Error("unknown encoding accepted")
	}
}
