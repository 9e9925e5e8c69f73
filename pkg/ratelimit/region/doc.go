// Package region shares one rate limit among regions that each decide
// locally, in their own Redis, and never together admit more than the
// limit in any window. It knows nothing of Envoy or gRPC.
//
// Regions are clients of one allocator one level up (DESIGN.md §3, "Across
// regions"). The allocator's state is one hash per key in a Redis
// designated global (Global), which regions reach only in the background
// (Exchanger); a region's replicas decide against the region's Redis
// (Local). Nothing crosses a region on the request path.
//
// Semantics: a Rule is Limit requests per fixed window of Period, windows
// aligned to the Unix epoch and numbered w = floor(t / Period). A region's
// grant is a budget for one window index: the allocator grants the current
// window and, within Lease of its end, the next one, so a grant lapses at
// the end of the window it is for, at most Period + Lease after it was made.
// A region may admit in window w at most max(grant(w), floor), where the
// floor is Rule.Floor of the limit, reserved for every configured region in
// every window and never granted to another.
//
// The bound, for every window index w (proof in docs/multi-region.md):
//
//	sum over regions of admitted(w) <= sum over regions of max(G_r(w), F) <= Limit
//
// where G_r(w) is region r's grant for w in the global store. It rests on
// three rules the code keeps: the global script grants growth only into
// the room the other regions' grants and floors leave (one atomic script);
// a region raises its local cap only to a value the global store already
// holds, and lowers it (never below what it has admitted) before it lowers
// the global grant; and only one replica per key and region writes the local
// caps at a time (a lease in the same hash, checked by every write). None of
// it depends on clocks agreeing: grants are per window index.
//
// Shares follow demand: each exchange reports the region's demand (hits
// asked, admitted or not, per window) and divides the limit among the
// regions that reported by quota.Shares, max-min fair, with the unused part
// split equally (the fairness of RLQS shares, one code). A key is exchanged
// every interval, and sooner when the region's count of hits asked, read
// every quarter interval in the region's Redis, shows its demand moved, or
// when the next window's grant is due (the store grants two windows only,
// so a region is granted in every window); a key used in this region only
// backs off up to Topology.Solo. None of that touches the bound, which holds
// whatever demand is reported, and whenever.
//
// RLQS Envoys of a global limit are given part of the region's cap
// (Store.QuotaBudget): reserved per window in the region's Redis before it
// is assigned, counted as admitted by decisions and by the exchanger, and
// their demand reported with the region's. The bound then counts what they
// admit, under conditions on Envoy stated in docs/multi-region.md.
package region
