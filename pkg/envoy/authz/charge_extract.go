package authz

import (
	"bytes"
	"encoding/json"
	"math"
	"net/url"
	"strconv"
	"strings"
)

// Bounds of the scans that read a charge's key from a body. A body past its
// bound is not read: the key does not apply. (A cost is read from the reply
// as it streams by, in bounded memory whatever its size: charge_scan.go.)
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

// jsonAt returns the value at a dot-separated path of object fields in a
// JSON document; false when the document does not parse or has no such
// field.
func jsonAt(doc []byte, path string) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return nil, false
	}
	for _, seg := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[seg]; !ok {
			return nil, false
		}
	}
	return v, true
}

// jsonKey reads an account key at path: a non-empty string or a number as
// written.
func jsonKey(doc []byte, path string) string {
	v, _ := jsonAt(doc, path)
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	return ""
}

// formKey reads a field of an application/x-www-form-urlencoded body; ""
// when absent or the body is not a form.
func formKey(body []byte, name string) string {
	q, err := url.ParseQuery(string(body))
	if err != nil {
		return ""
	}
	return q.Get(name)
}

// isEventStream reports whether a content-type is text/event-stream.
func isEventStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}
