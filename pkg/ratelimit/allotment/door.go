package allotment

import (
	"sync/atomic"
	"time"
)

// doorBits sizes the doorkeeper: 64Ki instants, 512 KiB per Store. A
// cold key looks warm by mistake only when another key seen within the
// horizon shares its slot: with k keys seen per horizon, about k/65536 of
// the cold ones. It does not grow with MaxSlices: what fills it is the keys
// seen per horizon, not the slices held.
const doorBits = 16

// doorkeeper remembers when keys without a slice were last seen, so that a
// key gets a slice only when it shows a second request within the horizon.
// A slice pays for its bookkeeping (entry, lots, meter, and the GC over
// them) only when several requests use it; a key seen once per horizon
// would lease one token per request, what an exact decision costs plus
// that bookkeeping, so it is decided as exact is instead.
//
// Keys share slots by hash, without a lock (a slot serves keys of every
// table shard). A collision only makes a slot's last instant more recent,
// so it can make a cold key look warm (it then takes the slice path: a
// lease, correct, only dearer), never a warm key look cold. Either answer
// is correct: a cold key is charged on the shared count like exact mode,
// a warm one leases from it.
type doorkeeper struct {
	horizon int64 // nanoseconds
	last    []atomic.Int64
}

func newDoorkeeper(horizon time.Duration) doorkeeper {
	return doorkeeper{horizon: int64(horizon), last: make([]atomic.Int64, 1<<doorBits)}
}

// seen records that the key of hash h was seen at now and reports whether
// it had been seen within the horizon before (a warm key), and when.
func (d *doorkeeper) seen(h uint64, now time.Time) (time.Time, bool) {
	t := now.UnixNano()
	prev := d.last[h>>(64-doorBits)].Swap(t)
	return time.Unix(0, prev), prev != 0 && t-prev <= d.horizon
}

// doorHash is the doorkeeper's hash of id, whose key hashes to hk: the
// limit's terms are mixed in, so that two limits on one key have their own
// slots (the leasable algorithms' names differ in length). Multiplying by
// an odd constant after each term carries every bit into the top 16 bits,
// the slot's index.
func doorHash(hk uint64, id sliceKey) uint64 {
	const odd = 0x9e3779b97f4a7c15
	h := hk
	for _, v := range [...]uint64{uint64(id.requests), uint64(id.period), uint64(id.burst), uint64(len(id.alg))} {
		h = (h ^ v) * odd
	}
	return h
}
