package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// MaxIdentityLen is the longest identity kept verbatim inside a key's hash
// tag; a longer one is replaced by its SHA-256, which bounds key size.
const MaxIdentityLen = 1024

// hashMarker starts a hashed identity. An identity that itself starts with
// it is hashed too, so no verbatim identity can equal another's hash form.
const hashMarker = "#"

// tagIdentity returns the identity as it appears between the braces of the
// hash tag. ratelimit.Key never produces braces, but the Store accepts any
// string: an empty identity (an empty tag "{}" would hash the whole key and
// scatter one request's limits over several slots), one holding '{' or '}'
// (which would move the tag), an overlong one, and one that looks hashed
// are all replaced by "#" + hex SHA-256. The mapping stays injective.
func tagIdentity(id string) string {
	if id != "" && len(id) <= MaxIdentityLen && !strings.HasPrefix(id, hashMarker) && !strings.ContainsAny(id, "{}") {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashMarker + hex.EncodeToString(sum[:])
}

// stateKey is the Redis key of one limit's state:
// <prefix>:rl:{<identity>}:<algorithm>:<period in ms>. Every limit of one
// identity shares the hash tag, so one script may touch them all on a
// cluster. The Request contract (no two limits with the same algorithm and
// period) makes the key unique per limit.
func stateKey(prefix, tagged string, l ratelimit.Limit) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(tagged) + 32)
	b.WriteString(prefix)
	b.WriteString(":rl:{")
	b.WriteString(tagged)
	b.WriteString("}:")
	b.WriteString(string(l.Algorithm.OrDefault()))
	b.WriteByte(':')
	var digits [20]byte // the period's, written in place: no string of their own
	b.Write(strconv.AppendInt(digits[:0], l.Period.Milliseconds(), 10))
	return b.String()
}

// requestKeys returns KEYS for one request, in the order of its limits.
func requestKeys(prefix string, req ratelimit.Request) []string {
	return appendRequestKeys(make([]string, 0, len(req.Limits)), prefix, req)
}

// appendRequestKeys appends req's KEYS to dst, so that a caller with room of
// its own (a call's array) builds them without allocating a slice.
func appendRequestKeys(dst []string, prefix string, req ratelimit.Request) []string {
	tagged := tagIdentity(req.Key)
	for _, l := range req.Limits {
		dst = append(dst, stateKey(prefix, tagged, l))
	}
	return dst
}
