// Package keypart encodes user-controlled parts (tenants, descriptor values,
// Idempotency-Keys) of storage keys so that no value can forge another key or
// break a Redis hash tag. The rate-limit and idempotency keyspaces share it.
package keypart

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLen is the longest escaped part kept verbatim; a longer one is replaced
// by "#" + the hex SHA-256 of its escaped form, bounding key length.
const MaxLen = 128

// Write appends s to b, percent-escaping every byte outside printable ASCII
// (0x21-0x7e) and every byte in special. special must hold '%' (the escape
// itself), '#' (the hash marker) and '{' '}' (hash-tag braces), plus the
// caller's separators: then escaped parts never contain a separator or a
// brace, and a hashed part cannot be forged by a literal one.
func Write(b *strings.Builder, s, special string) {
	if !needsEscape(s, special) && len(s) <= MaxLen {
		b.WriteString(s) // the common case: no allocation
		return
	}
	esc := escape(s, special)
	if len(esc) <= MaxLen {
		b.WriteString(esc)
		return
	}
	sum := sha256.Sum256([]byte(esc))
	b.WriteByte('#')
	b.WriteString(hex.EncodeToString(sum[:]))
}

func isSpecial(c byte, special string) bool {
	return c < 0x21 || c > 0x7e || strings.IndexByte(special, c) >= 0
}

func needsEscape(s, special string) bool {
	for i := 0; i < len(s); i++ {
		if isSpecial(s[i], special) {
			return true
		}
	}
	return false
}

func escape(s, special string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSpecial(c, special) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
