// Package rls serves Envoy's rate limit service,
// envoy.service.ratelimit.v3.RateLimitService: it reads the
// envoyproxy/ratelimit policy format (pkg/policy's domains and descriptor
// tree), matches each descriptor of a ShouldRateLimit call, decides every
// counted one in one ratelimit.Store batch, and answers per-descriptor
// statuses, the overall code, and the RateLimit headers to add.
//
// Every request shape is decided (bounds and fallbacks on MaxDescriptors);
// the only errors are a failed store (codes.Unavailable, through
// envoy.StoreStatus) and the caller's own cancellation or deadline. The
// server logs nothing unless given a logger (WithRLSLogger), and then at
// most one line per envoy.LogSampleInterval.
package rls
