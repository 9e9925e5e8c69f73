package authz

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

const usagePath = "usage.total_tokens"

func TestJSONCostScan(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, 500) + "1" + strings.Repeat("}", 500)
	tests := []struct {
		name, doc string
		want      int64
		found     bool
	}{
		{"usage last", `{"choices":[{"text":"a \"usage\": {\"total_tokens\": 1}"}],"usage":{"prompt_tokens":3,"total_tokens":42}}`, 42, true},
		{"usage first", `{"usage":{"total_tokens":42},"choices":[]}`, 42, true},
		{"in an array: no path", `{"list":[{"usage":{"total_tokens":5}}]}`, 0, false},
		{"under another field", `{"x":{"usage":{"total_tokens":5}},"usage":{"n":1}}`, 0, false},
		{"field of the wrong object", `{"usage":{"x":{"total_tokens":5}}}`, 0, false},
		{"escaped key", `{"us\u0061ge":{"total\u005ftokens":7}}`, 7, true},
		{"last occurrence wins", `{"usage":{"total_tokens":5,"total_tokens":6}}`, 6, true},
		{"last number wins over a later non-number", `{"usage":{"total_tokens":5,"total_tokens":null}}`, 5, true},
		{"string holding a number", `{"usage":{"total_tokens":"12"}}`, 12, true},
		{"escaped string", `{"usage":{"total_tokens":"\u0031\u0032"}}`, 12, true},
		{"decimal rounded up", `{"usage":{"total_tokens":2.1}}`, 3, true},
		{"exponent", `{"usage":{"total_tokens":1.5e2}}`, 150, true},
		{"negative", `{"usage":{"total_tokens":-3}}`, 0, false},
		{"object at the path", `{"usage":{"total_tokens":{"n":3}}}`, 0, false},
		{"whitespace everywhere", " \r\n{ \"usage\" :\t{ \"total_tokens\" : 8 } } ", 8, true},
		{"broken after the cost: it stands", `{"usage":{"total_tokens":9}} trailing`, 9, true},
		{"broken after the cost, inside", `{"usage":{"total_tokens":9},,,]`, 9, true},
		{"broken before the cost", `{"a":]"usage":{"total_tokens":9}}`, 0, false},
		{"cut in the number: read at the end", `{"usage":{"total_tokens":12`, 12, true},
		{"only the first document", `{"a":1}{"usage":{"total_tokens":9}}`, 0, false},
		{"top-level array", `[{"usage":{"total_tokens":9}}]`, 0, false},
		{"top-level scalar", `12`, 0, false},
		{"number longer than kept", `{"usage":{"total_tokens":1.` + strings.Repeat("0", maxScanValue) + `}}`, 0, false},
		{"key longer than kept", `{"` + strings.Repeat("u", 200) + `":1,"usage":{"total_tokens":4}}`, 4, true},
		{"deep before the cost", `{"x":` + deep + `,"usage":{"total_tokens":11}}`, 11, true},
		{"too deep: stops", `{"usage":{"total_tokens":3},"x":` + strings.Repeat("[", maxScanDepth) + `}`, 3, true},
		{"too deep before the cost", `{"x":` + strings.Repeat("[", maxScanDepth) + strings.Repeat("]", maxScanDepth) + `,"usage":{"total_tokens":3}}`, 0, false},
		{"mismatched close", `{"usage":{"total_tokens":3]`, 3, true},
		{"empty", ``, 0, false},
	}
	for _, tt := range tests {
		if got, ok := jsonCost([]byte(tt.doc), usagePath); got != tt.want || ok != tt.found {
			t.Errorf("%s: cost %d found %v; want %d %v", tt.name, got, ok, tt.want, tt.found)
		}
	}
}

// jsonScanSplit feeds doc in the given pieces.
func jsonScanSplit(path string, pieces ...[]byte) (int64, bool) {
	s := newJSONCostScan(path)
	for _, p := range pieces {
		s.write(p)
	}
	s.end()
	return s.cost, s.found
}

// TestJSONCostScanEveryBoundary splits samples at every byte offset (and
// byte by byte): the chunking of a reply never changes its cost.
func TestJSONCostScanEveryBoundary(t *testing.T) {
	t.Parallel()
	samples := []string{
		`{"id":"x","choices":[{"message":{"content":"he said \"hi\\\" \u00e9"}}],"usage":{"prompt_tokens":3,"total_tokens":1234}}`,
		`{"us\u0061ge" : {"total_tokens" : "5.5"}, "z": [true, false, null, -1.5e-3]}`,
	}
	for _, doc := range samples {
		want, wantOK := jsonCost([]byte(doc), usagePath)
		if !wantOK {
			t.Fatalf("sample %s has no cost", doc)
		}
		for i := 0; i <= len(doc); i++ {
			for j := i; j <= len(doc); j += 7 {
				got, ok := jsonScanSplit(usagePath, []byte(doc[:i]), []byte(doc[i:j]), []byte(doc[j:]))
				if got != want || !ok {
					t.Fatalf("split at %d and %d: cost %d found %v, want %d", i, j, got, ok, want)
				}
			}
		}
		var bytewise [][]byte
		for i := range len(doc) {
			bytewise = append(bytewise, []byte{doc[i]})
		}
		if got, ok := jsonScanSplit(usagePath, bytewise...); got != want || !ok {
			t.Errorf("byte by byte: cost %d found %v, want %d", got, ok, want)
		}
	}
}

// sseSplit feeds a stream in the given pieces.
func sseSplit(pieces ...[]byte) (int64, bool) {
	s := &sseCost{path: usagePath}
	for _, p := range pieces {
		s.write(p)
	}
	s.end()
	return s.cost, s.found
}

func TestSSECostLines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stream string
		want         int64
		found        bool
	}{
		{"CR line ends", "data: {\"usage\":\rdata: {\"total_tokens\":6}}\r\rdata: [DONE]\r\r", 6, true},
		{"mixed line ends", "data: {\"usage\":{\"total_tokens\":1}}\r\n\ndata: {\"usage\":{\"total_tokens\":2}}\r\r", 2, true},
		{"comment and other fields", ": ping\nevent: message\nid: 7\nretry: 10\ndata: {\"usage\":{\"total_tokens\":3}}\n\n", 3, true},
		{"a field named like data", "datum: {\"usage\":{\"total_tokens\":3}}\n\n", 0, false},
		{"data with a space before it", " data: {\"usage\":{\"total_tokens\":3}}\n\n", 0, false},
		{"empty data line", "data\ndata: {\"usage\":{\"total_tokens\":4}}\n\n", 4, true},
		{"the cost of a later event that breaks stands", "data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {\"usage\":{\"total_tokens\":5},]\n\n", 5, true},
		{"an event without it keeps the last", "data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {}\n\n", 4, true},
		{"events do not join", "data: {\"usage\":\n\ndata: {\"total_tokens\":4}}\n\n", 0, false},
	}
	for _, tt := range tests {
		if got, ok := sseSplit([]byte(tt.stream)); got != tt.want || ok != tt.found {
			t.Errorf("%s: cost %d found %v; want %d %v", tt.name, got, ok, tt.want, tt.found)
		}
	}
}

// TestSSECostEveryBoundary splits a stream at every pair of byte offsets.
func TestSSECostEveryBoundary(t *testing.T) {
	t.Parallel()
	stream := ": hi\r\nevent: x\r\ndata: {\"choices\":[{\"delta\":\"a\\\"b\"}]}\r\n\r\n" +
		"data: {\"usage\":\rdata:{\"total_tokens\": 77}}\r\rdata: [DONE]\n\n"
	want, wantOK := sseSplit([]byte(stream))
	if want != 77 || !wantOK {
		t.Fatalf("whole: cost %d found %v, want 77", want, wantOK)
	}
	for i := 0; i <= len(stream); i++ {
		for j := i; j <= len(stream); j++ {
			if got, ok := sseSplit([]byte(stream[:i]), []byte(stream[i:j]), []byte(stream[j:])); got != want || !ok {
				t.Fatalf("split at %d and %d: cost %d found %v, want %d", i, j, got, ok, want)
			}
		}
	}
}

// refJSONCost is the cost at usagePath as encoding/json reads a whole
// document (the last value of each field), and whether the scan should
// find it too (false: no cost, or a value longer than a scan keeps).
func refJSONCost(doc []byte) (int64, bool) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return 0, false
	}
	for _, seg := range strings.Split(usagePath, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		if v, ok = obj[seg]; !ok {
			return 0, false
		}
	}
	switch x := v.(type) {
	case json.Number:
		if len(x) > maxScanValue {
			return 0, false
		}
		return parseCost(x.String())
	case string:
		if 6*len(x) > maxScanValue {
			return 0, false
		}
		return parseCost(x)
	}
	return 0, false
}

// FuzzCostScan: no input panics the scans or grows what they keep past
// their bounds; a reply's cost does not depend on its chunking; and a
// cost encoding/json reads from a whole document the scan reads too (the
// scan may find more: a last occurrence in a document with duplicate
// fields, a cost before a syntax error).
func FuzzCostScan(f *testing.F) {
	f.Add([]byte(`{"usage":{"total_tokens":42}}`), uint16(3), uint16(9))
	f.Add([]byte(`{"choices":[{"text":"\"usage\""}],"usage":{"prompt_tokens":1,"total_tokens":"7"}}`), uint16(20), uint16(40))
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":5}}\r\n\r\ndata: [DONE]\n\n"), uint16(6), uint16(7))
	f.Add([]byte("data\rdata:{\"usage\":\ndata: {\"total_tokens\":1e3}}\r\r: c\n"), uint16(1), uint16(2))
	f.Add([]byte(`{"us\u0061ge":{"total_tokens":1.5},"usage":{"total_tokens":-1}}`), uint16(0), uint16(0))
	f.Add([]byte(`[[[[{"usage":{"total_tokens":1}}]]]],{"a":{"b":`), uint16(5), uint16(5))
	f.Fuzz(func(t *testing.T, doc []byte, a, b uint16) {
		i := min(int(a), len(doc))
		j := min(max(int(b), i), len(doc))
		want, wantOK := jsonCost(doc, usagePath)
		s := newJSONCostScan(usagePath)
		for _, p := range [][]byte{doc[:i], doc[i:j], doc[j:]} {
			s.write(p)
			if len(s.tok) > max(s.keyMax, maxScanValue) || len(s.stack) > maxScanDepth {
				t.Fatalf("kept a token of %d, a stack of %d", len(s.tok), len(s.stack))
			}
		}
		s.end()
		if s.cost != want || s.found != wantOK {
			t.Fatalf("split at %d, %d: cost %d found %v; whole: %d %v", i, j, s.cost, s.found, want, wantOK)
		}
		if ref, ok := refJSONCost(doc); ok && (!wantOK || want != ref) {
			t.Fatalf("encoding/json reads %d, the scan %d found %v", ref, want, wantOK)
		}
		sseWant, sseOK := sseSplit(doc)
		sc := &sseCost{path: usagePath}
		for _, p := range [][]byte{doc[:i], doc[i:j], doc[j:]} {
			sc.write(p)
			if len(sc.name) > len("data") {
				t.Fatalf("kept %d bytes of a line's start", len(sc.name))
			}
		}
		sc.end()
		if sc.cost != sseWant || sc.found != sseOK {
			t.Fatalf("stream split at %d, %d: cost %d found %v; whole: %d %v", i, j, sc.cost, sc.found, sseWant, sseOK)
		}
	})
}

// TestCostScanMemoryBounded: a 2 MiB reply and a stream of one 2 MiB event
// are scanned in 64 KiB chunks allocating a few hundred bytes, not the
// reply (not parallel: the heap counters are the process's).
func TestCostScanMemoryBounded(t *testing.T) {
	reply := bigJSONReply(2<<20, 777)
	stream := append(append([]byte("data: "), reply...), "\n\ndata: [DONE]\n\n"...)
	for _, tt := range []struct {
		name string
		body []byte
	}{{"json", reply}, {"sse", stream}} {
		var js *jsonCostScan
		var sc *sseCost
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if tt.name == "json" {
			js = newJSONCostScan(usagePath)
		} else {
			sc = &sseCost{path: usagePath}
		}
		for p := tt.body; len(p) > 0; p = p[min(64<<10, len(p)):] {
			chunk := p[:min(64<<10, len(p))]
			if js != nil {
				js.write(chunk)
			} else {
				sc.write(chunk)
			}
		}
		runtime.ReadMemStats(&after)
		cost, found := int64(0), false
		if js != nil {
			js.end()
			cost, found = js.cost, js.found
		} else {
			sc.end()
			cost, found = sc.cost, sc.found
		}
		if cost != 777 || !found {
			t.Errorf("%s: cost %d found %v, want 777", tt.name, cost, found)
		}
		allocated := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s: %d bytes allocated scanning %d bytes", tt.name, allocated, len(tt.body))
		if allocated > 16<<10 {
			t.Errorf("%s: %d bytes allocated scanning %d bytes, want under 16 KiB", tt.name, allocated, len(tt.body))
		}
	}
}
