package idempotency

import (
	"strings"

	"github.com/extauthz/extauthz/internal/keypart"
)

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

// writeKeyPart escapes s, or hashes it when longer than keypart.MaxLen; '|'
// separates scope and key, the rest are keypart's required specials and ':'
// (Redis key separator).
func writeKeyPart(b *strings.Builder, s string) { keypart.Write(b, s, "%|{}:#") }
