package allotment

import (
	"sync/atomic"
	"time"
)

// The doorkeeper's slots: 64Ki of them, 512 KiB per Store. Each holds the
// last instant its key was seen, in microseconds modulo 2^40 (12.7 days),
// and a 24-bit tag of that key. Its size does not follow MaxSlices: what
// fills it is the keys seen per horizon, not the slices held.
const (
	doorBits = 16
	tagBits  = 24
	tagMask  = 1<<tagBits - 1
	tickMask = 1<<(64-tagBits) - 1
)

// doorkeeper remembers when keys without a slice were last seen, so that a
// key gets a slice only when it shows a second request within the horizon.
// A slice pays for its bookkeeping (entry, lots, meter, and the GC over
// them) only when several requests use it; a key seen once per horizon
// would lease one token per request, what an exact decision costs plus
// that bookkeeping, so it is decided as exact is instead.
//
// Keys share slots by hash, without a lock (a slot serves keys of every
// table shard). Either answer is correct, whatever the collisions: a cold
// key is charged on the shared count as exact mode charges it, a warm one
// leases from that count. Collisions only cost. With k keys seen per
// horizon, about k/65536 of the warm keys find their slot taken by
// another key since their last request and look cold once (an exact
// decision; their next request finds their own tag). The tag keeps
// another key's instant from making a cold key look warm (a slice and a
// lease for nothing), except when the tags match too, about once in 16M
// collisions: without it, BenchmarkColdKeys (5,000 keys a horizon) sent
// about 5,000/65,536 = 7.6% of its cold keys down the slice path.
type doorkeeper struct {
	horizon uint64 // microseconds
	slots   []atomic.Uint64
}

func newDoorkeeper(horizon time.Duration) doorkeeper {
	return doorkeeper{horizon: uint64(horizon.Microseconds()), slots: make([]atomic.Uint64, 1<<doorBits)}
}

// seen records that the key of hash h was seen at now and reports whether
// it had been seen within the horizon before (a warm key), and when.
func (d *doorkeeper) seen(h uint64, now time.Time) (time.Time, bool) {
	tick := uint64(now.UnixMicro())
	tag := h >> (64 - doorBits - tagBits) & tagMask
	prev := d.slots[h>>(64-doorBits)].Swap(tick<<tagBits | tag)
	if prev == 0 || prev&tagMask != tag {
		return time.Time{}, false // never seen, or another key was since
	}
	age := (tick - prev>>tagBits) & tickMask
	return now.Add(-time.Duration(age) * time.Microsecond), age <= d.horizon
}

// doorHash is the doorkeeper's hash of id, whose key hashes to hk: the
// limit's terms are mixed in, so that two limits on one key have their own
// slots (the leasable algorithms' names differ in length). Multiplying by
// an odd constant after each term carries every bit into the top 40 bits,
// the slot's index and the tag.
func doorHash(hk uint64, id sliceKey) uint64 {
	const odd = 0x9e3779b97f4a7c15
	h := hk
	for _, v := range [...]uint64{uint64(id.Requests), uint64(id.Period), uint64(id.Burst), uint64(len(id.Algorithm))} {
		h = (h ^ v) * odd
	}
	return h
}
