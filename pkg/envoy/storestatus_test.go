package envoy

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func TestLimitName(t *testing.T) {
	t.Parallel()
	one := []ratelimit.Limit{{Requests: 1, Period: time.Second}}
	two := []ratelimit.Limit{{Requests: 1, Period: time.Second}, {Name: "daily", Requests: 9, Period: 24 * time.Hour}}
	for _, c := range []struct {
		limits []ratelimit.Limit
		i      int
		want   string
	}{
		{one, 0, "owner"},
		{two, 0, "owner#0"},
		{two, 1, "daily"},
	} {
		if got := LimitName("owner", c.limits, c.i); got != c.want {
			t.Errorf("limitName(owner, %d limits, %d) = %q, want %q", len(c.limits), c.i, got, c.want)
		}
	}
}
