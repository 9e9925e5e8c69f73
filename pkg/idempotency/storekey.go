package idempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxKeyPart is the longest escaped scope or key kept verbatim in a storage
// key; a longer one is replaced by its SHA-256 (bounding Redis key length).
const maxKeyPart = 128

// StorageKey returns the identity of (scope, key) inside a store:
// "<escaped scope>|<escaped key>". Both parts are percent-escaped so that no
// scope or key can forge another pair or contain a Redis hash-tag brace:
// the result never holds '{' or '}', and distinct pairs never share a
// result. A part longer than 128 bytes after escaping becomes "#" + the hex
// SHA-256 of its escaped form ('#' is always escaped, so this cannot be
// forged either).
func StorageKey(scope, key string) string {
	var b strings.Builder
	b.Grow(len(scope) + len(key) + 1)
	writeKeyPart(&b, scope)
	b.WriteByte('|')
	writeKeyPart(&b, key)
	return b.String()
}

func writeKeyPart(b *strings.Builder, s string) {
	esc := escapeKeyPart(s)
	if len(esc) <= maxKeyPart {
		b.WriteString(esc)
		return
	}
	sum := sha256.Sum256([]byte(esc))
	b.WriteByte('#')
	b.WriteString(hex.EncodeToString(sum[:]))
}

func escapeKeyPart(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c > 0x20 && c < 0x7f && strings.IndexByte("%|{}:#", c) < 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}
