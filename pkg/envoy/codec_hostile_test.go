package envoy_test

import (
	"bytes"
	"fmt"
	"testing"
	"unicode/utf8"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
)

func TestCodecRewriteIsInjectiveAndValid(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, v := range envoytest.HostileValues {
		got := &commonrlv3.RateLimitDescriptor_Entry{}
		if err := envoy.UnmarshalLenient(rawDescriptorEntry(v), got); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		out := got.GetValue()
		if !utf8.ValidString(out) {
			t.Errorf("%q decoded to invalid UTF-8 %q", v, out)
		}
		if utf8.ValidString(v) && !bytes.Contains([]byte(v), []byte(string(envoy.Escape))) && out != v {
			t.Errorf("valid %q was rewritten to %q", v, out)
		}
		if prev, dup := seen[out]; dup {
			t.Errorf("%q and %q both decode to %q", prev, v, out)
		}
		seen[out] = v
	}
}

// rawDescriptorEntry encodes one Entry{key: "k", value: v}.
func rawDescriptorEntry(v string) []byte {
	var e []byte
	e = protowire.AppendTag(e, 1, protowire.BytesType)
	e = protowire.AppendString(e, "k")
	e = protowire.AppendTag(e, 2, protowire.BytesType)
	return protowire.AppendString(e, v)
}

// TestCodecRewritesEveryByteDistinctly decodes every single byte between
// two valid ones: each of the 256 gives its own string, and each byte that
// is not UTF-8 on its own becomes Escape and exactly its two upper-case hex
// digits, high then low, so no two bytes can share a rewrite (the random
// hostile values seldom differ only in a low digit).
func TestCodecRewritesEveryByteDistinctly(t *testing.T) {
	t.Parallel()
	seen := map[string]byte{}
	for b := range 256 {
		raw := "x" + string([]byte{byte(b)}) + "y"
		got := &commonrlv3.RateLimitDescriptor_Entry{}
		if err := envoy.UnmarshalLenient(rawDescriptorEntry(raw), got); err != nil {
			t.Fatalf("byte %#x: %v", b, err)
		}
		want := raw
		if b >= utf8.RuneSelf {
			want = "x" + string(envoy.Escape) + fmt.Sprintf("%02X", b) + "y"
		}
		if got.GetValue() != want {
			t.Errorf("byte %#x decoded to %q, want %q", b, got.GetValue(), want)
		}
		if prev, dup := seen[got.GetValue()]; dup {
			t.Errorf("bytes %#x and %#x both decode to %q", prev, b, got.GetValue())
		}
		seen[got.GetValue()] = byte(b)
	}
}
