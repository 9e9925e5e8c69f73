package redisstore

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

//go:embed lease.lua
var leaseSrc string

// decideMark is the line of lease.lua that decide.lua replaces: a lease is
// decided by decide.lua itself, run as a function, so the two cannot
// drift.
const decideMark = "-- @decide.lua@\n"

// leaseScript decides an allotment lease (ratelimit.Request.Lease) and
// records it in the limit's ledger.
var leaseScript = redisscript.New(strings.Replace(leaseSrc, decideMark, decideSrc, 1))

//go:embed reset.lua
var resetSrc string

// resetScript resets one limit, keeping charged what its ledger says
// allotment holders may still use.
var resetScript = redisscript.New(resetSrc)

// ledgerKey is the key of the lease ledger of the limit whose state is at
// state: the same hash tag, so one script touches both on a cluster. No
// state key ends in ":leases" (they end in the period's digits).
func ledgerKey(state string) string { return state + ":leases" }

// isLease reports whether r charges an allotment lease.
func isLease(r ratelimit.Request) bool { return r.Lease.Holder != "" }

// hasLease reports whether any request of reqs is a lease.
func hasLease(reqs []ratelimit.Request) bool {
	for i := range reqs {
		if isLease(reqs[i]) {
			return true
		}
	}
	return false
}

// validateLease checks what a lease adds to a request: one limit, the
// default charge mode (lease.lua reads no other), and a held count that is
// not negative.
func validateLease(r ratelimit.Request) error {
	switch {
	case !isLease(r):
		return nil
	case len(r.Limits) != 1:
		return fmt.Errorf("%w: a lease charges one limit, not %d", ratelimit.ErrInvalidLimit, len(r.Limits))
	case r.Charge != ratelimit.ChargeIfAdmitted:
		return fmt.Errorf("%w: a lease is charged only if admitted, not in charge mode %s", ratelimit.ErrInvalidHits, r.Charge)
	case r.Lease.Held < 0:
		return fmt.Errorf("%w: lease holds %d tokens", ratelimit.ErrInvalidHits, r.Lease.Held)
	}
	return nil
}

// callFor is the script call that decides r: lease.lua for a lease, else
// the script scriptFor picks.
func (s *Store) callFor(r ratelimit.Request, now int64) redisscript.Call {
	args := scriptArgs(r, now)
	keys := requestKeys(s.prefix, r)
	if !isLease(r) {
		return redisscript.Call{Script: scriptFor(args), Keys: keys, Args: args}
	}
	return redisscript.Call{Script: leaseScript, Keys: append(keys, ledgerKey(keys[0])),
		Args: append(args, r.Lease.Holder, r.Lease.Held)}
}
