package envoytest

import (
	"testing"

	"github.com/dunglas/httpsfv"
)

// SFList parses a header value as a Structured Field List, failing the test
// when it is malformed.
func SFList(t *testing.T, name, value string) httpsfv.List {
	t.Helper()
	l, err := httpsfv.UnmarshalList([]string{value})
	if err != nil {
		t.Fatalf("%s: %q is not an sf-list: %v", name, value, err)
	}
	return l
}

// SFInt parses a header value as a Structured Field Integer.
func SFInt(t *testing.T, name, value string) int64 {
	t.Helper()
	it, err := httpsfv.UnmarshalItem([]string{value})
	if err != nil {
		t.Fatalf("%s: %q is not an sf-item: %v", name, value, err)
	}
	n, ok := it.Value.(int64)
	if !ok {
		t.Fatalf("%s: %q is not an sf-integer", name, value)
	}
	return n
}
