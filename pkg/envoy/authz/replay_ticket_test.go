package authz

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// TestReplayTicketExpiresAtItsSecond pins a ticket's life to the second: it
// is good through the whole second its TTL ends in and refused from the
// next one on, neither a second less nor a second more.
func TestReplayTicketExpiresAtItsSecond(t *testing.T) {
	t.Parallel()
	for _, issuedAt := range []time.Duration{0, 400 * time.Millisecond, 999 * time.Millisecond} {
		t0 := time.Unix(1_800_000_000, 0).Add(issuedAt)
		now := t0
		r, err := NewReplayer([]byte(strings.Repeat("s", MinReplaySecret)), func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		tk := r.issue("orders", "acme", "k1", HeaderIdempotencyKey, idempotency.Response{Status: 201, BodyRef: &blob.Ref{}}, nil)
		lastSecond := t0.Add(DefaultTicketTTL).Truncate(time.Second)
		for _, c := range []struct {
			at   time.Time
			want error
		}{
			{t0, nil},
			{lastSecond, nil},
			{lastSecond.Add(999 * time.Millisecond), nil},
			{lastSecond.Add(time.Second), errTicketExpired},
			{lastSecond.Add(2 * time.Second), errTicketExpired},
		} {
			now = c.at
			if _, err := r.verify(tk); !errors.Is(err, c.want) {
				t.Errorf("issued at +%v, verified %v after: %v, want %v", issuedAt, c.at.Sub(t0), err, c.want)
			}
		}
	}
}
