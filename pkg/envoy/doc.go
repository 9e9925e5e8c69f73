// Package envoy serves Envoy's external-service gRPC APIs (the rate limit
// service v3 today; ext_authz and ext_proc alongside) by translating their
// protos to calls on the core packages and the results back to responses,
// statuses and headers.
//
// It is the only package that imports go-control-plane: pkg/ratelimit,
// pkg/policy and pkg/idempotency stay free of Envoy types. Servers here do
// not log; they report through Metrics on an injected registry and return
// gRPC status errors (codes.InvalidArgument for a bad request,
// codes.Unavailable when the store failed). Tracing, when wired, is a pair
// of gRPC interceptors (Tracing) around the unchanged handlers.
package envoy
