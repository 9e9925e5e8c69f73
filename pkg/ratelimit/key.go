package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key   string
	Value string
}

// MaxPartLen is the longest encoded part (tenant, domain, entry key or
// value) kept verbatim in a key; a longer one is replaced by its SHA-256.
const MaxPartLen = 128

// Key builds the identity of a rate-limit state from a tenant (may be empty),
// a domain and a descriptor's entries. Every part is escaped so that no value
// can forge another key or contain a Redis hash-tag brace: the result never
// holds '{' or '}', and two distinct inputs never give the same key.
//
// Shape: tenant|domain|k1=v1|k2=v2, each part percent-escaped; a part longer
// than MaxPartLen after escaping becomes "#" + hex SHA-256 of its escaped form
// ('#' itself is always escaped, so a hashed part cannot be forged either).
func Key(tenant, domain string, entries []Entry) string {
	var b strings.Builder
	b.Grow(len(tenant) + len(domain) + 16*len(entries) + 2)
	writePart(&b, tenant)
	b.WriteByte('|')
	writePart(&b, domain)
	for _, e := range entries {
		b.WriteByte('|')
		writePart(&b, e.Key)
		b.WriteByte('=')
		writePart(&b, e.Value)
	}
	return b.String()
}

// writePart appends the escaped (and, when long, hashed) form of s.
func writePart(b *strings.Builder, s string) {
	if !needsEscape(s) && len(s) <= MaxPartLen {
		b.WriteString(s)
		return
	}
	esc := escape(s)
	if len(esc) <= MaxPartLen {
		b.WriteString(esc)
		return
	}
	sum := sha256.Sum256([]byte(esc))
	b.WriteByte('#')
	b.WriteString(hex.EncodeToString(sum[:]))
}

// special reports whether c must be percent-escaped inside a key part:
// separators, hash-tag braces, the escape and hash markers, and every byte
// outside printable ASCII.
func special(c byte) bool {
	switch c {
	case '%', '|', '=', ':', '{', '}', '#':
		return true
	}
	return c < 0x21 || c > 0x7e
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if special(s[i]) {
			return true
		}
	}
	return false
}

func escape(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if special(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
