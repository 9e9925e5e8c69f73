package memstore

import (
	"fmt"
	"hash/maphash"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// locate returns the shard of key and the key's hash. All states of a key
// live in one shard (chosen by the hash's top bits), so one lock covers a
// request's limits; a state's map key is this hash XOR salt(ident).
func (s *Store) locate(key string) (*shard, uint64) {
	h := maphash.String(s.seed, key)
	return &s.shards[h>>s.shift], h
}

// decide evaluates every limit of r against the current states, writing
// one Result per limit into res, and charges them as r.Charge says: all of
// them only if all admit (ChargeIfAdmitted; ChargeReserve, admitting on
// one hit), all whatever they decide (ChargeAlways), none (ChargeNever).
func (s *Store) decide(now int64, r ratelimit.Request, res []ratelimit.Result) (bool, error) {
	sh, h := s.locate(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.closed.Load() {
		return false, ratelimit.ErrClosed
	}
	now = sh.monotonic(now)
	var entBuf [4]*entry
	var nextBuf [4]ratelimit.State
	ents, nexts := entBuf[:0], nextBuf[:0]
	allowed := true
	for i, l := range r.Limits {
		id := identOf(r.Key, l)
		e := sh.find(h^salt(id), id)
		var cur ratelimit.State
		if e != nil {
			cur = e.st
		}
		rr, next, err := ratelimit.DecideCharge(l, now, cur, r.Hits, r.Charge)
		if err != nil {
			return false, err
		}
		res[i], allowed = rr, allowed && rr.Allowed
		ents, nexts = append(ents, e), append(nexts, next)
	}
	if !allowed && r.Charge == ratelimit.ChargeReserve {
		checkOneHit(now, r, ents, res)
	}
	if !charges(r, allowed) {
		return allowed, nil
	}
	// Existing states first: an insertion may reclaim or evict entries, and
	// every write through a held pointer must land before that. Charged
	// states expire after now, so reclaiming never takes them; only an
	// eviction of last resort can (see reclaim).
	for i, e := range ents {
		if e != nil {
			sh.set(e, nexts[i])
		}
	}
	for i, e := range ents {
		if e == nil && nexts[i].Expires > now { // a refund of nothing stores nothing
			id := identOf(r.Key, r.Limits[i])
			sh.insert(h^salt(id), id, nexts[i], now)
		}
	}
	return allowed, nil
}

// checkOneHit rewrites the Results of a refused ChargeReserve request as
// its one-hit checks (a limit that admitted reports what is left, not the
// state after a charge that never happened), as decide.lua answers.
func checkOneHit(now int64, r ratelimit.Request, ents []*entry, res []ratelimit.Result) {
	for i, l := range r.Limits {
		var cur ratelimit.State
		if ents[i] != nil {
			cur = ents[i].st
		}
		res[i], _, _ = ratelimit.DecideCharge(l, now, cur, 1, ratelimit.ChargeNever) // validated above
	}
}

// charges reports whether r's decision writes its next states: a
// ChargeAlways always does, a ChargeIfAdmitted or ChargeReserve only when
// every limit admitted, a ChargeNever (or a request of no hits) never.
func charges(r ratelimit.Request, allowed bool) bool {
	switch {
	case r.Hits == 0 || r.Charge == ratelimit.ChargeNever:
		return false
	case r.Charge == ratelimit.ChargeAlways:
		return true
	}
	return allowed
}

// validateRequest checks what Decide cannot see: the request as a whole.
func validateRequest(r ratelimit.Request) error {
	if len(r.Limits) == 0 {
		return fmt.Errorf("%w: a request needs at least one limit", ratelimit.ErrInvalidLimit)
	}
	if err := ratelimit.CheckCharge(r.Hits, r.Charge); err != nil {
		return err
	}
	for i, l := range r.Limits {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("limit %d: %w", i, err)
		}
		for _, o := range r.Limits[:i] {
			if o.Algorithm.OrDefault() == l.Algorithm.OrDefault() && o.Period == l.Period {
				return fmt.Errorf("%w: limits %q and %q share algorithm %s and period %s",
					ratelimit.ErrInvalidLimit, o.Name, l.Name, l.Algorithm.OrDefault(), l.Period)
			}
		}
	}
	return nil
}
