package ratelimit

import (
	"strings"

	"github.com/extauthz/extauthz/internal/keypart"
)

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key   string
	Value string
}

// MaxPartLen is the longest encoded part (tenant, domain, entry key or
// value) kept verbatim in a key; a longer one is replaced by its SHA-256.
const MaxPartLen = keypart.MaxLen

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

// keySpecial are the bytes escaped in every part besides non-printable
// ones: the separators '|' and '=', ':' (Redis key separator), the braces of
// the hash tag, and keypart's own '%' and '#'.
const keySpecial = "%|=:{}#"

func writePart(b *strings.Builder, s string) { keypart.Write(b, s, keySpecial) }
