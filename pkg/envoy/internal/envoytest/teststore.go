package envoytest

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// NewTestStore returns the real memory store on the injected clock.
func NewTestStore(t testing.TB, now func() time.Time) ratelimit.Store {
	t.Helper()
	s, err := memstore.New(memstore.Options{Now: now, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
