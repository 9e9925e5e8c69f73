package policy

import (
	"strings"
	"testing"
)

// TestIdempotencyStoredBodyAndScope: max_stored_body_bytes and key_scope
// default to 100 MiB and tenant, read what is given, and refuse a stored
// cap below the inline one or an unknown scope, naming file and field.
func TestIdempotencyStoredBodyAndScope(t *testing.T) {
	t.Parallel()
	route := func(extra string) string {
		return "http:\n  routes:\n    - name: r\n      path_prefix: /r\n      idempotency:\n        " + extra + "\n"
	}
	id := mustLoad(t, "http.yaml", route("key_required: false")).HTTP.Routes[0].Idempotency
	if id.MaxStoredBodyBytes != 100<<20 || id.KeyScope != KeyScopeTenant {
		t.Errorf("defaults: max_stored_body_bytes %d, key_scope %q; want 100 MiB, tenant", id.MaxStoredBodyBytes, id.KeyScope)
	}
	id = mustLoad(t, "http.yaml", route("max_body_bytes: 10\n        max_stored_body_bytes: 20\n        key_scope: Route")).HTTP.Routes[0].Idempotency
	if id.MaxStoredBodyBytes != 20 || id.KeyScope != KeyScopeRoute {
		t.Errorf("max_stored_body_bytes %d, key_scope %q; want 20, route", id.MaxStoredBodyBytes, id.KeyScope)
	}
	for _, tt := range []struct{ yaml, field, msg string }{
		{route("key_scope: global"), "http.routes[0].idempotency.key_scope", "want tenant or route"},
		{route("max_stored_body_bytes: 5"), "http.routes[0].idempotency.max_stored_body_bytes", "at least max_body_bytes"},
	} {
		msg, _ := loadErr(t, "http.yaml", tt.yaml)
		if !strings.Contains(msg, "http.yaml:") || !strings.Contains(msg, tt.field+": ") || !strings.Contains(msg, tt.msg) {
			t.Errorf("error %q\nwant file http.yaml, field %q and %q", msg, tt.field, tt.msg)
		}
	}
}
