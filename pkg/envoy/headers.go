package envoy

import (
	"bytes"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Response header names (lower case: Envoy and HTTP/2 carry them so).
const (
	HeaderRateLimitPolicy = "ratelimit-policy"
	HeaderRateLimit       = "ratelimit"
	HeaderRetryAfter      = "retry-after"
)

// Quota is one limit as the RateLimit header fields describe it.
type Quota struct {
	Name      string        // the policy's name (LimitName)
	Quota     int64         // requests per Window
	Window    time.Duration // the limit's period
	Remaining int64         // requests left now
	Reset     time.Duration // until the quota is whole again (or, when denied, until a retry may pass)
}

// CeilSeconds is d in whole seconds, rounded up.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// LimitName names limit i of limits, as RateLimit-Policy, RateLimit, the
// 429 problem's violated-policies and RLS's current_limit show it: the
// limit's own name, else its owner's (the RLS rule's, the HTTP route's),
// with "#i" when the owner has several limits.
func LimitName(owner string, limits []ratelimit.Limit, i int) string {
	switch {
	case limits[i].Name != "":
		return limits[i].Name
	case len(limits) == 1:
		return owner
	}
	return owner + "#" + strconv.Itoa(i)
}

// rateLimitHeaders renders the IETF RateLimit header fields
// (draft-ietf-httpapi-ratelimit-headers-10, Structured Field Lists):
//
//	RateLimit-Policy: "per-tenant";q=100;w=60, "daily";q=10000;w=86400
//	RateLimit: "per-tenant";r=42;t=17, "daily";r=9120;t=51234
//
// with one item per counted (non-shadow) limit of the request, in
// descriptor order, so a client sees every limit it is subject to rather
// than a single "tightest" one; identical items are sent once. t is the
// seconds until the limit resets, or, for a limit that denied the request,
// until it would admit it again. Over the limit, Retry-After carries the
// longest wait among the denying descriptors, in seconds rounded up.
func rateLimitHeaders(qs []Quota, over bool, retry time.Duration) []*corev3.HeaderValue {
	var f fields
	if len(qs) > 0 {
		f.begin(2, qs)
		for _, q := range qs {
			f.item()
			f.buf = appendSFString(f.buf, q.Name)
			f.buf = appendParam(f.buf, ";q=", q.Quota)
			f.buf = appendParam(f.buf, ";w=", max(CeilSeconds(q.Window), 1))
			f.end()
		}
		f.field(HeaderRateLimitPolicy)
		for _, q := range qs {
			f.item()
			f.buf = appendSFString(f.buf, q.Name)
			f.buf = appendParam(f.buf, ";r=", q.Remaining)
			f.buf = appendParam(f.buf, ";t=", CeilSeconds(q.Reset))
			f.end()
		}
		f.field(HeaderRateLimit)
	}
	f.retryAfter(over, retry)
	return f.headers()
}

// maxSFInteger is the largest Structured Field Integer (RFC 9651 §3.3.1:
// at most 15 digits). Limits are int64 in the policy, and a recipient must
// ignore a whole field with one out-of-range parameter, so values are
// clamped to the range rather than written as they are.
const maxSFInteger = 999_999_999_999_999

// appendInt appends n as a non-negative sf-integer, clamped to its range.
func appendInt(b []byte, n int64) []byte {
	return strconv.AppendInt(b, min(max(n, 0), maxSFInteger), 10)
}

// appendParam appends a parameter (its ";name=" prefix given) with an
// sf-integer value.
func appendParam(b []byte, prefix string, n int64) []byte {
	return appendInt(append(b, prefix...), n)
}

// sfString renders s as a Structured Field string (RFC 9651 §3.3.3): only
// printable ASCII is allowed, so anything else becomes '_', and '"' and
// '\' are escaped.
func sfString(s string) string { return string(appendSFString(nil, s)) }

func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// maxFields is the most header fields one answer has: draft-03's trio and
// Retry-After.
const maxFields = 4

// fields renders the header fields of one answer into a single buffer,
// which becomes one string that every value is a slice of: the response
// headers of a decision cost a handful of allocations, not one per item
// and parameter. A field is a Structured Field List whose identical items
// are sent once, or (Retry-After) a bare integer. A fields lives on the
// caller's stack: its bookkeeping is in arrays, not slices.
type fields struct {
	buf   []byte
	n     int // fields done
	keys  [maxFields]string
	ends  [maxFields]int // where each field's value ends in buf
	start int            // where the current field's value starts
	at    int            // where the current item starts
	// The current list's items, to drop repeats: the first ones inline.
	items  [8][2]int
	more   [][2]int
	nItems int
}

// begin sizes the buffer for fields that list qs (each field: a quoted
// name and two integer parameters per quota, at most 40 bytes besides the
// name), so that rendering never grows it.
func (f *fields) begin(fieldsPerQuota int, qs []Quota) {
	n := 16
	for _, q := range qs {
		n += fieldsPerQuota * (len(q.Name) + 40)
	}
	f.buf = make([]byte, 0, n)
}

// item opens an item of the current list.
func (f *fields) item() {
	if len(f.buf) > f.start {
		f.buf = append(f.buf, ", "...)
	}
	f.at = len(f.buf)
}

// end closes the item, dropping it (and its separator) when an earlier
// item of the list is the same.
func (f *fields) end() {
	it := f.buf[f.at:]
	for i := range f.nItems {
		b := f.bounds(i)
		if bytes.Equal(f.buf[b[0]:b[1]], it) {
			f.buf = f.buf[:max(f.at-2, f.start)]
			return
		}
	}
	b := [2]int{f.at, len(f.buf)}
	if f.nItems < len(f.items) {
		f.items[f.nItems] = b
	} else {
		f.more = append(f.more, b)
	}
	f.nItems++
}

func (f *fields) bounds(i int) [2]int {
	if i < len(f.items) {
		return f.items[i]
	}
	return f.more[i-len(f.items)]
}

// field closes the current value under key and starts the next.
func (f *fields) field(key string) {
	f.keys[f.n], f.ends[f.n] = key, len(f.buf)
	f.n++
	f.start, f.nItems, f.more = len(f.buf), 0, f.more[:0]
}

// retryAfter adds Retry-After when the answer is a denial.
func (f *fields) retryAfter(over bool, retry time.Duration) {
	if over {
		f.buf = appendInt(f.buf, CeilSeconds(retry))
		f.field(HeaderRetryAfter)
	}
}

// headers returns the fields as Envoy header values, nil when there are
// none.
func (f *fields) headers() []*corev3.HeaderValue {
	if f.n == 0 {
		return nil
	}
	all := string(f.buf)
	vals, hs := headerValues(f.n)
	from := 0
	for i := range f.n {
		vals[i].Key, vals[i].Value = f.keys[i], all[from:f.ends[i]]
		hs[i], from = &vals[i], f.ends[i]
	}
	return hs
}

// headerValues returns n header values and n pointers to fill, the
// pointers being what the proto wants: both in one allocation, sized for
// two (the RateLimit pair) or for four (the most an answer has).
func headerValues(n int) ([]corev3.HeaderValue, []*corev3.HeaderValue) {
	if n <= 2 {
		r := new(struct {
			vals [2]corev3.HeaderValue
			ptrs [2]*corev3.HeaderValue
		})
		return r.vals[:n], r.ptrs[:n]
	}
	r := new(struct {
		vals [maxFields]corev3.HeaderValue
		ptrs [maxFields]*corev3.HeaderValue
	})
	return r.vals[:n], r.ptrs[:n]
}
