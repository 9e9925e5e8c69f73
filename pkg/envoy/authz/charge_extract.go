package authz

import (
	"math"
	"strconv"
	"strings"
)

// Bounds of the scans that read a charge's key from a body. A body past its
// bound is not read: the key is unreadable, and the limit's `unreadable`
// choice applies. (A cost is read from the reply as it streams by, in
// bounded memory whatever its size: charge_scan.go.)
const (
	// maxChargeKeyBody bounds the request body read for an account key.
	maxChargeKeyBody = 64 << 10
)

// parseCost reads a cost written as a number (a header or trailer value):
// a non-negative integer, or a decimal rounded up (a cost is never
// under-charged by its rounding).
func parseCost(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return n, true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > math.MaxInt64/2 || math.IsNaN(f) {
		return 0, false
	}
	return int64(math.Ceil(f)), true
}

// isEventStream reports whether a content-type is text/event-stream.
func isEventStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}
