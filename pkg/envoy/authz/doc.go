// Package authz serves the Envoy APIs that act on one HTTP request and its
// response: ext_authz (envoy.service.auth.v3.Authorization; Authz) takes the
// HTTP policy's rate-limit and Idempotency-Key decisions on the request,
// and ext_proc (envoy.service.ext_proc.v3.ExternalProcessor; ExtProc)
// stores or releases the upstream's response, or runs the whole
// Idempotency-Key lifecycle alone. The two are joined by the handoff
// ext_authz leaves in dynamic metadata (envoy.MetadataField). Stored
// replies whose body is in object storage are replayed through an HTTP
// endpoint (ReplayHandler) that Envoy is routed to with a signed ticket
// (Replayer).
//
// Answers to the client are problem+json (RFC 9457) with the types listed
// as Problem*; the caller's identity (tenant header, API key, principal,
// client address) scopes both limits and keys. The servers do not log:
// they count decisions and idempotency events on injected metrics
// (envoy.Metrics, IdempotencyMetrics). Check returns an error only when the
// rate-limit store failed (envoy.StoreStatus); Process only when its stream
// breaks or carries a message it cannot handle.
package authz
