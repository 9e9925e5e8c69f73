package authz

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
)

// Bounds of the scans that read a charge's key or cost from a body. A body
// (or one server-sent event) past its bound is not read: the key does not
// apply, the cost is missing.
const (
	// maxChargeKeyBody bounds the request body read for an account key.
	maxChargeKeyBody = 64 << 10
	// maxChargeCostBody bounds the JSON reply kept to read a cost from.
	maxChargeCostBody = 1 << 20
	// maxChargeEvent bounds one text/event-stream event kept to read a cost.
	maxChargeEvent = 64 << 10
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

// jsonCost reads a cost at path: a JSON number or a string holding one.
func jsonCost(doc []byte, path string) (int64, bool) {
	v, ok := jsonAt(doc, path)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case json.Number:
		return parseCost(x.String())
	case string:
		return parseCost(x)
	}
	return 0, false
}

// sseCost finds a cost in a text/event-stream reply as it streams by: the
// last event whose data parses as JSON with the field wins. It keeps only
// the event being received (up to maxChargeEvent), never the stream.
type sseCost struct {
	path    string
	partial []byte // the bytes after the last complete event
	skip    bool   // the event being received outgrew its bound
	// lineText counts the bytes other than CR and LF of the line being
	// received: 0 at its end means an empty line.
	lineText int
	cost     int64
	found    bool
}

// write feeds the next bytes of the stream.
func (s *sseCost) write(p []byte) {
	for len(p) > 0 {
		line, rest, full := cutLine(p)
		p = rest
		if !s.skip {
			s.partial = append(s.partial, line...)
		}
		if len(s.partial) > maxChargeEvent {
			s.partial, s.skip = s.partial[:0], true
		}
		s.lineText += len(bytes.TrimRight(line, "\r\n"))
		if !full {
			continue
		}
		// An empty line (only "\r\n" or "\n", even split across writes)
		// ends an event.
		if blank := s.lineText == 0; blank {
			s.event()
		}
		s.lineText = 0
	}
}

// cutLine splits p after its first '\n'; full reports whether there was one.
func cutLine(p []byte) (line, rest []byte, full bool) {
	if i := bytes.IndexByte(p, '\n'); i >= 0 {
		return p[:i+1], p[i+1:], true
	}
	return p, nil, false
}

// end ends the stream: an event not followed by a blank line counts too.
func (s *sseCost) end() { s.event() }

// event reads the event received so far and starts the next.
func (s *sseCost) event() {
	if !s.skip {
		if data := sseData(s.partial); len(data) > 0 {
			if n, ok := jsonCost(data, s.path); ok {
				s.cost, s.found = n, true
			}
		}
	}
	s.partial, s.skip = s.partial[:0], false
}

// sseData joins the data fields of one event (WHATWG server-sent events:
// "data:" lines, one optional space after the colon, joined by "\n").
func sseData(event []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(event, []byte("\n")) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if out != nil {
			out = append(out, '\n')
		}
		out = append(out, v...)
	}
	return out
}

// isEventStream reports whether a content-type is text/event-stream.
func isEventStream(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "text/event-stream")
}
