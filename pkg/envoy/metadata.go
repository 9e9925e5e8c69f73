package envoy

// ExtAuthzNamespace is the dynamic-metadata namespace Envoy files ext_authz's
// dynamic_metadata under; ext_proc must forward it
// (metadata_options.forwarding_namespaces.untyped) for wiring (b).
const ExtAuthzNamespace = "envoy.filters.http.ext_authz"

// The dynamic metadata ext_authz hands to ext_proc: one struct under the
// field MetadataField of ExtAuthzNamespace,
//
//	idempotency:
//	  action:        "lease"   the request goes upstream holding the lease
//	                 "replay"  completed, but the stored response cannot go
//	                           through ext_authz (binary body): ext_proc replays it
//	  scope, key:    the tenant and the Idempotency-Key
//	  scope_b64:     the tenant in base64, instead of scope when it is not
//	                 valid UTF-8 (Struct strings must be; a raw header may not)
//	  token:         the lease's owner token (action lease)
//	  route:         the policy route's name (store statuses, header allow-list)
//	  fingerprint:   hex SHA-256 of the request
//	  lease_ttl_ms, record_ttl_ms: the route's TTLs when the lease was taken
//
// The names are here, beside Tracing (which reads the action), the rest of
// the handoff with the servers that write and read it.
const (
	MetadataField  = "idempotency"
	MetadataAction = "action"
	ActionLease    = "lease"
	ActionReplay   = "replay"
)

// MetadataInFlight is the field of ExtAuthzNamespace, beside MetadataField,
// under which ext_authz hands a max_in_flight slot to ext_proc:
//
//	in_flight:
//	  key:     the slot set's key (identity and route)
//	  slot:    the slot's token
//	  ttl_ms:  the route's in_flight_ttl when the slot was taken
//
// ext_proc renews the slot while the stream lives and releases it when
// the stream ends, whichever replica that is: the store is shared.
const MetadataInFlight = "in_flight"
