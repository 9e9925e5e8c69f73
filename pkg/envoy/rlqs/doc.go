// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3, filter envoy.filters.http.rate_limit_quota):
// each Envoy keeps a token bucket per bucket ID, reports its usage every
// reporting interval, and this server assigns it its share of the bucket's
// global budget. The division itself is pkg/ratelimit/quota's; this package
// translates between Envoy's stream and that core.
//
// One stream is one client: an Envoy's gRPC stream gets a random client ID
// of its own. An Envoy that reconnects (to this replica or another) is a new
// client whose first demand is Unknown; its old demand drops out of the
// allocation when it expires from the demand store (two report intervals).
//
// What counts against the budget is what each client was sent, not what
// the allocation computed: every assignment sent is recorded as the
// client's grant (quota.GrantStore) for the assignment's time to live. A
// share that grows is recorded before it is sent, capped to what the other
// clients' live grants leave; one that shrinks or is re-sent is recorded
// after it is sent. So the assignments the Envoys hold never sum above the
// budget, whether an Envoy joins (it gets its share as the others' shrink,
// at their next tick) or reconnects. A stream that ends leaves its grants
// as orphans to its peer's address; a new stream whose first share does not
// fit takes over the smallest orphan of its own peer (a reconnected Envoy's
// own is at least that large), so a reconnect is sent its share at once and
// never over-admits (the one exception, a new Envoy behind the address of
// one whose stream just ended, is bounded in docs/rlqs.md). A first
// assignment that would be DENY_ALL for want of room is not sent: the Envoy
// keeps what it enforces (a reconnected one, its old stream's assignment)
// meanwhile.
//
// A bucket ID is matched against the policy domain named by the stream's
// first message, through the same descriptor tree as RLS
// (policy.Domain.MatchBucket: at each level a child whose key is in the
// bucket, keys tried in byte order, every entry used). The matched rule is
// the bucket's global budget: the smallest requests-per-second of its limits
// (a limit of 10000/day becomes 0.116/s: RLQS enforces rates, not windows).
// What each bucket gets:
//
//   - a rule with limits: a token bucket, its share of the budget;
//   - no matching rule, or a domain the policy does not have: ALLOW_ALL,
//     counted (and, for the domain, logged at most every envoy.LogSampleInterval);
//   - an unlimited or shadow_mode rule: ALLOW_ALL;
//   - a blocked rule (requests_per_unit: 0): DENY_ALL.
//
// Assignments are pushed when a report changes them materially
// (quota.Material), on a per-stream tick that re-reads the allocation (so an
// Envoy learns of other Envoys' reports within one tick, on whichever
// replica they report), and re-sent at every report (and by a tick when one
// is about an interval old) so that they never expire, not even while an
// Envoy whose stream ended waits for its next report to re-open it
// (assignment_time_to_live is two intervals plus one second).
//
// Faults: request-shaped input never ends a stream (a bucket that cannot be
// matched is answered ALLOW_ALL; an empty bucket ID is ignored and counted);
// a stream whose first message names no domain is closed with
// InvalidArgument. When the demand store fails, FailClosed says what the
// buckets get: false (open) re-sends the last assignment with a fresh TTL
// (ALLOW_ALL when there was none), true (closed) sends DENY_ALL. Both are
// counted; the server logs through Options.Logger, sampled. A report's (or
// a tick's) buckets are decided concurrently under one deadline
// (Options.ReportTimeout): those still undecided when it passes get the
// failure mode's answer at once, so a slow store costs a report at most its
// deadline, not one store timeout per bucket. Drain (at the
// replica's shutdown) ends every stream with UNAVAILABLE: Envoy keeps its
// assignments and re-opens the stream, on another replica, at its next
// report.
package rlqs
