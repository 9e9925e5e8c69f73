// Package randtoken makes the random tokens that name an owner or a holder
// (idempotency lease owners, in-flight slots, RLQS stream identities): the
// one place that reads crypto/rand for them.
package randtoken

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes in lowercase hex (2n characters). 16 bytes
// (128 bits) make a collision between live tokens out of reach.
func Hex(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error since Go 1.24: it crashes
	// the program rather than hand out predictable bytes.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
