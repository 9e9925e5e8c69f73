package policy

import (
	"strings"
	"testing"
	"time"
)

func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "inflight.yaml", `
http:
  routes:
    - {name: reports, path_prefix: /reports, max_in_flight: 10, in_flight_ttl: 5s}
    - {name: export, path_prefix: /export, max_in_flight: 1}
    - {name: rest, path_prefix: /}
`).HTTP
	for i, want := range []struct {
		n   int
		ttl time.Duration
	}{{10, 5 * time.Second}, {1, DefaultInFlightTTL}, {0, DefaultInFlightTTL}} {
		if r := h.Routes[i]; r.MaxInFlight != want.n || r.InFlightTTL != want.ttl {
			t.Errorf("route %s: max_in_flight %d in_flight_ttl %v, want %d %v", r.Name, r.MaxInFlight, r.InFlightTTL, want.n, want.ttl)
		}
	}
}

// TestMaxInFlightValidation: each problem names file, line and field.
func TestMaxInFlightValidation(t *testing.T) {
	t.Parallel()
	const head = "http:\n  routes:\n    - name: api\n      path_prefix: /api\n"
	tests := []struct{ name, yaml, where, msg string }{
		{"zero", head + "      max_in_flight: 0\n", ":5: http.routes[0].max_in_flight: ", "want an integer from 1"},
		{"negative", head + "      max_in_flight: -3\n", ":5: http.routes[0].max_in_flight: ", "want an integer from 1"},
		{"not a number", head + "      max_in_flight: many\n", ":5: http.routes[0].max_in_flight: ", "expected an integer"},
		{"ttl under 1s", head + "      max_in_flight: 2\n      in_flight_ttl: 500ms\n", ":6: http.routes[0].in_flight_ttl: ", "want a duration of at least 1s"},
		{"ttl garbage", head + "      max_in_flight: 2\n      in_flight_ttl: soon\n", ":6: http.routes[0].in_flight_ttl: ", "want a duration of at least 1s"},
		{"ttl alone", head + "      in_flight_ttl: 5s\n", ":3: http.routes[0].in_flight_ttl: ", "needs max_in_flight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, _ := loadErr(t, "inflight.yaml", tt.yaml)
			if !strings.Contains(msg, "inflight.yaml"+tt.where+tt.msg) {
				t.Errorf("error %q\nwant inflight.yaml%s%s", msg, tt.where, tt.msg)
			}
		})
	}
}
