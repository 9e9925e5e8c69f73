package idempotency

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Fingerprint identifies the request an Idempotency-Key was first used with:
// a retry must present the same one, or Begin answers Mismatch.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in lower-case hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// ParseFingerprint reads the hex form written by String.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	if len(s) != 2*len(f) {
		return f, fmt.Errorf("fingerprint: want %d hex digits, got %d", 2*len(f), len(s))
	}
	if _, err := hex.Decode(f[:], []byte(s)); err != nil {
		return f, fmt.Errorf("fingerprint: %w", err)
	}
	return f, nil
}

// fingerprintVersion starts the hashed encoding, so that a future change of
// the encoding can never collide with today's fingerprints.
const fingerprintVersion = "extauthz/idempotency/fingerprint/v1"

// NewFingerprint hashes a request: method, path (the request target, query
// included), the SHA-256 of body, and the selected headers (the route's
// fingerprint headers that the request carries; absent headers are left
// out, an empty one is present). Header names are compared case-insensitively
// and the order of different names does not matter; repeated fields keep
// their order.
//
// The hashed encoding is unambiguous: every field is length-prefixed, so no
// two different requests share an encoding.
func NewFingerprint(method, path string, body []byte, headers []Header) Fingerprint {
	return sha256.Sum256(encodeFingerprint(method, path, body, headers))
}

// encodeFingerprint returns the exact bytes NewFingerprint hashes.
func encodeFingerprint(method, path string, body []byte, headers []Header) []byte {
	bodySum := sha256.Sum256(body)
	hs := make([]Header, len(headers))
	for i, h := range headers {
		hs[i] = Header{Name: strings.ToLower(h.Name), Value: h.Value}
	}
	sort.SliceStable(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })

	n := len(fingerprintVersion) + len(method) + len(path) + len(bodySum) + 6*binary.MaxVarintLen64
	for _, h := range hs {
		n += len(h.Name) + len(h.Value) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	b = appendField(b, fingerprintVersion)
	b = appendField(b, method)
	b = appendField(b, path)
	b = appendField(b, string(bodySum[:]))
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = appendField(b, h.Name)
		b = appendField(b, h.Value)
	}
	return b
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}
