package allotment

import (
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// forgetRefunded makes every slice of an allotment limit refunded in reqs
// (ChargeAlways with negative Hits, decided on the inner store) forget the
// denial it remembered: the refund lowered the count the denial was read
// from, so the next request must lease again rather than be refused from
// memory. The refund itself never comes from a slice, whose tokens are
// admitted hits only; it lands on the shared count, as exact mode's does.
func (s *Store) forgetRefunded(reqs []ratelimit.Request) {
	for _, r := range reqs {
		if r.Charge != ratelimit.ChargeAlways || r.Hits >= 0 {
			continue
		}
		for _, l := range r.Limits {
			if l.Consistency != ratelimit.Allotment {
				continue
			}
			if e := s.table.lookup(sliceID(r.Key, l)); e != nil {
				e.mu.Lock()
				e.s.deniedUntil, e.s.deniedHits = time.Time{}, 0
				e.mu.Unlock()
			}
		}
	}
}
