package idempotency

import (
	"fmt"
	"strings"
)

// MaxKeyLen is the longest accepted Idempotency-Key, in characters after
// unquoting (Stripe's limit; the IETF draft sets none).
const MaxKeyLen = 255

// ParseKey validates the value of an Idempotency-Key header field and
// returns the key. Two forms are accepted:
//
//   - the IETF draft's Structured Field string, `"..."` (RFC 8941 §3.3.3):
//     printable ASCII including space, with `\"` and `\\` the only escapes;
//     parameters after the closing quote are not accepted;
//   - a bare token, as most clients send: printable ASCII without space,
//     comma, double quote or backslash. The comma is refused because Envoy
//     joins repeated header fields with commas, and a client must not send
//     the field twice.
//
// The key must be 1 to MaxKeyLen characters. Errors wrap ErrInvalidKey.
func ParseKey(field string) (string, error) {
	v := strings.Trim(field, " \t")
	if v == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	var (
		key string
		err error
	)
	if v[0] == '"' {
		key, err = parseSFString(v)
	} else {
		key, err = parseBareKey(v)
	}
	if err != nil {
		return "", err
	}
	if key == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return "", fmt.Errorf("%w: longer than %d characters", ErrInvalidKey, MaxKeyLen)
	}
	return key, nil
}

// parseSFString parses v, which starts with '"', as exactly one sf-string.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("%w: bad escape in quoted key", ErrInvalidKey)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", fmt.Errorf("%w: characters after the closing quote", ErrInvalidKey)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: non-printable character in quoted key", ErrInvalidKey)
		default:
			b.WriteByte(c)
		}
		if b.Len() > MaxKeyLen {
			return "", fmt.Errorf("%w: longer than %d characters", ErrInvalidKey, MaxKeyLen)
		}
	}
	return "", fmt.Errorf("%w: unterminated quoted key", ErrInvalidKey)
}

// parseBareKey checks an unquoted key.
func parseBareKey(v string) (string, error) {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= 0x20 || c > 0x7e || c == '"' || c == '\\' || c == ',' {
			return "", fmt.Errorf("%w: character %q not allowed in an unquoted key", ErrInvalidKey, c)
		}
	}
	return v, nil
}

// ValidKey reports whether k is a key ParseKey can return: 1 to MaxKeyLen
// bytes of printable ASCII (space included).
func ValidKey(k string) bool {
	if k == "" || len(k) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
