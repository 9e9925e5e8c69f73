package authz

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Bounds of the streaming cost scanners. A reply is read as it streams by,
// chunk by chunk, and never kept: whatever its size, and whatever the size
// of one server-sent event, a scanner holds at most
//
//   - one byte per open container, up to maxScanDepth (deeper: the scan
//     stops, keeping a cost already found);
//   - the key being read while it may name the path's next field, up to six
//     times the path's longest field name (the longest escaped spelling of
//     it: \uXXXX per byte); a longer key is not that field;
//   - the value at the path, up to maxScanValue bytes (a longer number or
//     string is not a cost);
//   - for an event stream (sseCost, charge_sse.go), the first bytes of a
//     line, up to "data:".
const (
	maxScanDepth = 10000 // encoding/json's own nesting limit
	maxScanValue = 64
)

// jsonCostScan finds a cost at a dot-separated path of object fields in one
// JSON document fed in pieces (write, then end): the last occurrence of the
// path holding a number (or a string holding one, as parseCost reads it)
// wins, wherever in the document it is (OpenAI-style replies put usage
// last). Only the first top-level value is read. The scan is lenient: it
// follows the structure (objects, arrays, strings and their escapes) without
// validating literals or numbers; a byte that breaks the structure stops
// it, and a cost found before it stands (the upstream did say it).
type jsonCostScan struct {
	path   []string
	keyMax int // the longest key kept: 6 × the longest field name

	stack   []byte // the open containers, '{' or '['
	matched int    // the bottom frames that are the values at path[:i]
	state   scanState
	onPath  bool // the value to come is at path[:len(stack)]
	inKey   bool // the string being read is an object key
	esc     bool // in a string, right after a backslash
	keep    bool // the token being read is kept in tok
	tok     []byte
	tokOver bool // the token outgrew its bound
	stopped bool // the document ended, or broke

	cost  int64
	found bool
}

type scanState uint8

const (
	scanValue        scanState = iota // a value is due
	scanValueOrClose                  // after '[': a value or ']'
	scanKeyOrClose                    // after '{': a key or '}'
	scanKey                           // after ',' in an object: a key
	scanColon                         // after a key
	scanAfter                         // after a value: ',' or a close
	scanString                        // in a string (key or value)
	scanNumber                        // in a number
	scanLiteral                       // in true, false or null
)

func newJSONCostScan(path string) *jsonCostScan {
	s := &jsonCostScan{path: strings.Split(path, ".")}
	for _, seg := range s.path {
		s.keyMax = max(s.keyMax, 6*len(seg))
	}
	s.reset()
	return s
}

// reset starts a new document (the next event of a stream), keeping the
// cost found so far and the buffers' room.
func (s *jsonCostScan) reset() {
	s.stack, s.tok = s.stack[:0], s.tok[:0]
	s.matched, s.state, s.onPath = 0, scanValue, true
	s.inKey, s.esc, s.keep, s.tokOver, s.stopped = false, false, false, false, false
}

// write feeds the next bytes of the document.
func (s *jsonCostScan) write(p []byte) {
	for len(p) > 0 && !s.stopped {
		switch s.state {
		case scanString:
			p = s.string(p)
			continue
		case scanNumber, scanLiteral:
			if inScalar(s.state, p[0]) {
				s.keepBytes(p[:1])
				p = p[1:]
				continue
			}
			s.endScalar() // p[0] is read again, after the value
			continue
		}
		c := p[0]
		p = p[1:]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			continue
		}
		s.punct(c)
	}
}

// end ends the document: a number still being read counts.
func (s *jsonCostScan) end() {
	if !s.stopped && (s.state == scanNumber || s.state == scanLiteral) {
		s.endScalar()
	}
	s.stopped = true
}

func inScalar(st scanState, c byte) bool {
	if st == scanNumber {
		return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
	}
	return c >= 'a' && c <= 'z'
}

// punct reads a structural byte (or the first of a value).
func (s *jsonCostScan) punct(c byte) {
	switch s.state {
	case scanValueOrClose:
		if c == ']' {
			s.close('[')
			return
		}
		s.value(c)
	case scanValue:
		s.value(c)
	case scanKeyOrClose, scanKey:
		switch {
		case c == '}' && s.state == scanKeyOrClose:
			s.close('{')
		case c == '"':
			// A key is kept only in an object on the path: it may name
			// the path's next field.
			s.startToken(scanString, len(s.stack)-1 < s.matched)
			s.inKey = true
		default:
			s.stopped = true
		}
	case scanColon:
		if c != ':' {
			s.stopped = true
			return
		}
		s.state = scanValue
	case scanAfter:
		s.after(c)
	}
}

// value starts the value whose first byte is c.
func (s *jsonCostScan) value(c byte) {
	target := s.onPath && len(s.stack) == len(s.path)
	switch {
	case c == '{' || c == '[':
		if len(s.stack) == maxScanDepth {
			s.stopped = true
			return
		}
		if c == '{' && s.onPath && len(s.stack) < len(s.path) {
			s.matched = len(s.stack) + 1
		}
		s.stack = append(s.stack, c)
		s.state, s.onPath = scanKeyOrClose, false
		if c == '[' {
			s.state = scanValueOrClose
		}
	case c == '"':
		s.startToken(scanString, target)
		s.inKey = false
	case c == '-' || c >= '0' && c <= '9':
		s.startToken(scanNumber, target)
		s.keepBytes([]byte{c})
	case c >= 'a' && c <= 'z':
		s.startToken(scanLiteral, false)
	default:
		s.stopped = true
	}
}

// after reads what follows a value in its container.
func (s *jsonCostScan) after(c byte) {
	top := s.stack[len(s.stack)-1]
	switch {
	case c == ',' && top == '{':
		s.state = scanKey
	case c == ',':
		s.state, s.onPath = scanValue, false // an array's items are on no path
	case c == '}' || c == ']':
		s.close(c)
	default:
		s.stopped = true
	}
}

// close ends the innermost container with c ('}', ']' or the opening byte).
func (s *jsonCostScan) close(c byte) {
	top := s.stack[len(s.stack)-1]
	if (c == '}' || c == '{') != (top == '{') {
		s.stopped = true
		return
	}
	s.stack = s.stack[:len(s.stack)-1]
	s.matched = min(s.matched, len(s.stack))
	s.endValue()
}

// endValue follows a complete value: the document ends with its top one.
func (s *jsonCostScan) endValue() {
	s.state = scanAfter
	if len(s.stack) == 0 {
		s.stopped = true
	}
}

func (s *jsonCostScan) startToken(st scanState, keep bool) {
	s.state, s.keep, s.tok, s.tokOver, s.esc = st, keep, s.tok[:0], false, false
}

// keepBytes adds b to the token kept, up to its bound.
func (s *jsonCostScan) keepBytes(b []byte) {
	if !s.keep || s.tokOver {
		return
	}
	bound := maxScanValue
	if s.inKey && s.state == scanString {
		bound = s.keyMax
	}
	if len(s.tok)+len(b) > bound {
		s.tok, s.tokOver = s.tok[:0], true
		return
	}
	s.tok = append(s.tok, b...)
}

// string reads string bytes up to the closing quote; it returns the rest.
func (s *jsonCostScan) string(p []byte) []byte {
	for len(p) > 0 {
		if s.esc {
			s.esc = false
			s.keepBytes(p[:1])
			p = p[1:]
			continue
		}
		i := bytes.IndexAny(p, `"\`)
		if i < 0 {
			s.keepBytes(p)
			return nil
		}
		s.keepBytes(p[:i])
		if p[i] == '\\' {
			s.esc = true
			s.keepBytes(p[i : i+1])
			p = p[i+1:]
			continue
		}
		s.endString()
		return p[i+1:]
	}
	return nil
}

// endString ends a key (is it the path's next field?) or a string value
// (the cost, when at the path).
func (s *jsonCostScan) endString() {
	if s.inKey {
		depth := len(s.stack) - 1
		s.onPath = s.keep && !s.tokOver && depth < len(s.path) && unquote(s.tok) == s.path[depth]
		s.inKey, s.state = false, scanColon
		return
	}
	if s.keep && !s.tokOver {
		s.record(unquote(s.tok))
	}
	s.endValue()
}

// endScalar ends a number (the cost, when at the path) or a literal.
func (s *jsonCostScan) endScalar() {
	if s.state == scanNumber && s.keep && !s.tokOver {
		s.record(string(s.tok))
	}
	s.endValue()
}

func (s *jsonCostScan) record(v string) {
	if n, ok := parseCost(v); ok {
		s.cost, s.found = n, true
	}
}

// unquote decodes a JSON string's inner bytes; "" when they do not decode
// (no field name or cost is "").
func unquote(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw)
	}
	var v string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if json.Unmarshal(q, &v) != nil {
		return ""
	}
	return v
}

// jsonCost reads a cost at path from a whole JSON document, as the stream
// scan reads a reply.
func jsonCost(doc []byte, path string) (int64, bool) {
	s := newJSONCostScan(path)
	s.write(doc)
	s.end()
	return s.cost, s.found
}
