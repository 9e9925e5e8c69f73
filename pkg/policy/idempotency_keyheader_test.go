package policy

import (
	"strings"
	"testing"
)

// TestIdempotencyKeyHeaderAndMarker: key_header defaults to
// idempotency-key and reads a header name (lower-cased); x_cache_lookup
// defaults to false. A key header that is not a header name, a credential,
// a connection or proxy field, or the same on every request is refused,
// as is a non-boolean marker or replaying the first response's
// X-Cache-Lookup, naming file and field.
func TestIdempotencyKeyHeaderAndMarker(t *testing.T) {
	t.Parallel()
	route := func(extra string) string {
		return "http:\n  routes:\n    - name: r\n      path_prefix: /r\n      idempotency:\n        " + extra + "\n"
	}
	id := mustLoad(t, "http.yaml", route("key_required: false")).HTTP.Routes[0].Idempotency
	if id.KeyHeader != DefaultKeyHeader || id.CacheLookupMarker {
		t.Errorf("defaults: key_header %q, x_cache_lookup %v; want %q, false", id.KeyHeader, id.CacheLookupMarker, DefaultKeyHeader)
	}
	for _, name := range []string{"Webhook-Id", "x-github-delivery", "idempotency-key", "x-request-key"} {
		id = mustLoad(t, "http.yaml", route("key_header: "+name+"\n        x_cache_lookup: true")).HTTP.Routes[0].Idempotency
		if id.KeyHeader != strings.ToLower(name) || !id.CacheLookupMarker {
			t.Errorf("key_header %q, x_cache_lookup %v; want %q, true", id.KeyHeader, id.CacheLookupMarker, strings.ToLower(name))
		}
	}
	const keyField = "http.routes[0].idempotency.key_header"
	for _, tt := range []struct{ yaml, field, msg string }{
		{route(`key_header: "webhook id"`), keyField, "not a valid header name"},
		{route(`key_header: ":path"`), keyField, "not a valid header name"},
		{route("key_header: authorization"), keyField, "cannot carry an idempotency key"},
		{route("key_header: Cookie"), keyField, "cannot carry an idempotency key"},
		{route("key_header: host"), keyField, "cannot carry an idempotency key"},
		{route("key_header: content-type"), keyField, "cannot carry an idempotency key"},
		{route("key_header: x-forwarded-for"), keyField, "cannot carry an idempotency key"},
		{route("key_header: x-request-id"), keyField, "cannot carry an idempotency key"},
		{route("key_header: x-envoy-original-path"), keyField, "cannot carry an idempotency key"},
		{route("x_cache_lookup: sometimes"), "http.routes[0].idempotency.x_cache_lookup", ""},
		{route("replay_headers: [x-cache-lookup]"), "http.routes[0].idempotency.replay_headers[0]", "must never be replayed"},
		{"http:\n  identity:\n    sources:\n      - tenant_header: X-Sender\n" + route("key_header: x-sender")[len("http:\n"):], keyField, "names the caller"},
	} {
		msg, _ := loadErr(t, "http.yaml", tt.yaml)
		if !strings.Contains(msg, "http.yaml:") || !strings.Contains(msg, tt.field+": ") || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: error %q\nwant file http.yaml, field %q and %q", tt.yaml, msg, tt.field, tt.msg)
		}
	}
}
