// Package quota divides a global rate budget among clients that enforce
// their shares locally: Envoys speaking RLQS (rate_limit_quota) and, for
// allotments, extauthz replicas. It knows nothing of Envoy or gRPC; the
// protocol servers translate to and from it.
//
// Units: budgets, demands and shares are requests (tokens) per second, as
// float64; RateOf converts a limit's requests per period.
//
// The pieces:
//   - Shares: max-min fair division of a budget by demand (water-filling),
//     plus a Spare policy for budget the demands leave unused. Pure and
//     deterministic.
//   - BucketFor: a share as a token bucket Envoy 1.40 can enforce (whole-
//     second intervals; DenyAll for a share too small to express), and
//     Material: whether a new bucket is worth pushing to a client.
//   - Meter: one client's usage reports for one bucket as a demand.
//   - DemandStore: demands per (bucket, client) with a TTL, shared by the
//     replicas (package quotaredis) or in process (MemoryStore).
//   - GrantStore (part of DemandStore): the rate each client was last sent
//     per bucket, so that a share grows only into room the other clients'
//     grants leave.
//   - Allocator: the store plus Allocate, so that any replica computes the
//     same allocation from the same demands, and GrowGrant / SetGrant.
//
// What a server does with each usage report (a bucket of one client):
//
//	demand := meter.Observe(allowed, denied, now)     // the stream's Meter for this bucket
//	err := alloc.Report(ctx, bucketKey, clientID, demand, now)
//	shares, err := alloc.Allocate(ctx, bucketKey, budget, now)
//	for id, s := range shares {                       // the clients this replica serves
//		if !quota.Material(lastSent[id], s.Bucket) {
//			continue
//		}
//		g := quota.Grant{Bucket: bucketKey, Client: id, TTL: assignmentTTL}
//		if s.Bucket.Rate() <= lastSent[id].Rate() {   // shrinks: send, then record
//			send(id, s.Bucket); g.Rate = s.Bucket.Rate(); alloc.SetGrant(ctx, g, now)
//		} else {                                      // grows: record (capped), then send
//			tb, err := alloc.GrowGrant(ctx, g, s.Bucket, budget, now)
//			send(id, tb)
//		}
//	}
//	// when a client's stream ends: alloc.OrphanGrant(ctx, grant with its Peer, now)
//
// A client's report changes every client's share, so after each allocation
// the server checks all the clients of that bucket that it serves, not only
// the reporter. Clients on other replicas learn their new shares when they
// next report (every ReportInterval), or sooner if those replicas re-allocate
// on a timer. Allocations alone would let the assignments installed across
// the fleet add up to more than the budget until then (a newcomer's first
// report is Unknown demand and earns a fair share at once, while the clients
// whose shares shrank still hold their old ones). Grants close that gap: a
// server that records every share it sends (GrowGrant before sending one
// that grows, SetGrant after sending any other) never has more than the
// budget installed. Material adds no overshoot of its own: it holds back
// increases, never decreases.
//
// A client that reported no traffic while the others want more than the
// budget has a share of 0, which BucketFor makes DenyAll: max-min fairness
// gives nothing to a client that asked for nothing. Its next requests are
// denied but counted as demand, so its next report earns it a share. With
// SpareEqual the same client gets an equal part of any unused budget instead.
//
// Guarantees: the shares of one allocation, summed in client-ID order, never
// exceed the budget; the live grants of a bucket never sum above its budget
// (up to GrantSlack) when shares are sent as above; each bucket's rate is at most its share; a client that
// stops reporting drops out of the allocation once its last report is older
// than the store's TTL (DefaultTTL, two report intervals). The burst allowance
// on top of the budget is documented at BucketFor.
package quota
