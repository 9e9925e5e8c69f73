package authz

import "bytes"

// sseCost finds a cost in a text/event-stream reply as it streams by: the
// last event whose data holds the field wins. It splits the stream into
// lines (LF, CRLF or CR: WHATWG server-sent events) and feeds each event's
// data lines (joined by "\n", one optional space after "data:") to a JSON
// scan as they arrive: neither an event nor a line is kept.
type sseCost struct {
	path   string
	scan   *jsonCostScan
	name   []byte // the start of the line, while it may be "data:"
	line   sseLine
	afterC bool // the last byte was a CR: an LF next ends no other line
	data   int  // the data lines of the event being received
	cost   int64
	found  bool
}

type sseLine uint8

const (
	sseName      sseLine = iota // reading the field name
	sseDataStart                // right after "data:" (one space is dropped)
	sseData                     // in a data value: fed to the scan
	sseSkip                     // another field or a comment
)

// write feeds the next bytes of the stream.
func (s *sseCost) write(p []byte) {
	if s.scan == nil {
		s.scan = newJSONCostScan(s.path)
	}
	for len(p) > 0 {
		if s.afterC && p[0] == '\n' {
			p = p[1:]
		}
		s.afterC = false
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			s.text(p)
			return
		}
		s.text(p[:i])
		s.afterC = p[i] == '\r'
		s.endLine()
		p = p[i+1:]
	}
}

// text reads bytes of a line, without its end.
func (s *sseCost) text(p []byte) {
	for len(p) > 0 {
		switch s.line {
		case sseName:
			i := bytes.IndexByte(p, ':')
			if i < 0 {
				i = len(p)
			}
			if len(s.name)+i > len("data") {
				s.line = sseSkip
				return
			}
			s.name = append(s.name, p[:i]...)
			if i == len(p) {
				return
			}
			p = p[i+1:]
			s.line = sseSkip
			if string(s.name) == "data" {
				s.dataLine()
				s.line = sseDataStart
			}
		case sseDataStart:
			if p[0] == ' ' {
				p = p[1:]
			}
			s.line = sseData
		case sseData:
			s.scan.write(p)
			return
		case sseSkip:
			return
		}
	}
}

// dataLine starts a data line of the event: after the first, the lines are
// joined by "\n".
func (s *sseCost) dataLine() {
	if s.data > 0 {
		s.scan.write([]byte{'\n'})
	}
	s.data++
}

// endLine ends a line: an empty one ends the event; "data" alone is an
// empty data line.
func (s *sseCost) endLine() {
	switch {
	case s.line == sseName && len(s.name) == 0:
		s.event()
	case s.line == sseName && string(s.name) == "data":
		s.dataLine()
	}
	s.name, s.line = s.name[:0], sseName
}

// end ends the stream: an event not followed by a blank line counts too.
func (s *sseCost) end() {
	if s.scan != nil {
		s.event()
	}
}

// event reads the event received so far and starts the next.
func (s *sseCost) event() {
	if s.data > 0 {
		s.scan.end()
		if s.scan.found {
			s.cost, s.found = s.scan.cost, true
		}
	}
	s.scan.found, s.data = false, 0
	s.scan.reset()
}
