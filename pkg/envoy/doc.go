// Package envoy is the shared core of extauthz's Envoy-facing servers: what
// the rate limit service (package rls) and the ext_authz and ext_proc
// servers (package authz) both use to translate Envoy's protos to calls on
// the core packages and the results back to responses.
//
// It holds the decision metrics (Metrics, on an injected registry), the
// IETF and x-ratelimit header rendering (Quota, StyledHeaders), the one
// mapping from a failed store call to a gRPC status (StoreStatus), the
// policy snapshot source (PolicySource), the gRPC codec that decodes
// non-UTF-8 strings (escaped, one to one) instead of failing the call
// (Codec), the rate-limited log of the servers that log (SampledLog), the
// names of ext_authz's handoff to ext_proc in dynamic metadata, and
// Tracing, the gRPC interceptors that start one span per Envoy call (a
// pair around the unchanged handlers, wired only when tracing is on). The
// Rate Limit Quota Service (package rlqs) shares the policy's descriptor
// tree with RLS and only SampledLog of this core: its streams are
// long-lived and traced per report.
//
// Of the libraries under pkg/, this package and its subpackages are the only
// ones that import go-control-plane: pkg/ratelimit, pkg/policy and
// pkg/idempotency stay free of Envoy types. The servers report through
// Metrics and return gRPC status errors; the ones that log (RLS and RLQS)
// do so only through a logger the caller injects, sampled.
package envoy
