package randtoken

import (
	"encoding/hex"
	"testing"
)

func TestHexLengthAlphabetAndUniqueness(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		tok := Hex(16)
		if len(tok) != 32 {
			t.Fatalf("Hex(16) = %q: %d characters, want 32", tok, len(tok))
		}
		if _, err := hex.DecodeString(tok); err != nil {
			t.Fatalf("Hex(16) = %q: not hex: %v", tok, err)
		}
		if seen[tok] {
			t.Fatalf("Hex(16) repeated %q", tok)
		}
		seen[tok] = true
	}
	if got := Hex(12); len(got) != 24 {
		t.Errorf("Hex(12) = %q, want 24 characters", got)
	}
}
