package policy

import (
	"testing"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestDescriptorAlgorithmDefaults: LoadOptions.DescriptorAlgorithm is the
// algorithm of every descriptor limit that names none (envoyproxy/ratelimit's
// fixed windows where its users configure us); a limit naming one keeps it,
// and an HTTP route's limits keep gcra, our format's default.
func TestDescriptorAlgorithmDefaults(t *testing.T) {
	t.Parallel()
	docs := []Document{{Name: "peer.yaml", Data: []byte(`
domain: api
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: several
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: hour, requests_per_unit: 100, algorithm: gcra, burst: 20}
`)}, {Name: "http.yaml", Data: []byte(`
http:
  routes:
    - name: all
      path_prefix: /
      rate_limits: [{unit: minute, requests_per_unit: 10}]
`)}}
	for _, c := range []struct {
		opt  ratelimit.Algorithm
		want ratelimit.Algorithm
	}{{"", ratelimit.GCRA}, {ratelimit.FixedWindow, ratelimit.FixedWindow}, {ratelimit.SlidingWindow, ratelimit.SlidingWindow}} {
		p, err := LoadDocuments(docs, LoadOptions{DescriptorAlgorithm: c.opt})
		if err != nil {
			t.Fatal(err)
		}
		d := p.Domain("api")
		plain, _ := d.Match([]ratelimit.Entry{{Key: "plain", Value: "x"}})
		several, _ := d.Match([]ratelimit.Entry{{Key: "several", Value: "x"}})
		if got := plain.Rule.Limits[0].Algorithm; got != c.want {
			t.Errorf("default %q: plain limit %q, want %q", c.opt, got, c.want)
		}
		if a, b := several.Rule.Limits[0].Algorithm, several.Rule.Limits[1].Algorithm; a != c.want || b != ratelimit.GCRA {
			t.Errorf("default %q: several %q and %q, want %q and gcra (written)", c.opt, a, b, c.want)
		}
		if got := p.HTTP.Routes[0].Limits[0].Algorithm; got != ratelimit.GCRA {
			t.Errorf("default %q: HTTP route limit %q, want gcra", c.opt, got)
		}
	}
	if _, err := LoadDocuments(docs, LoadOptions{DescriptorAlgorithm: "leaky"}); err == nil {
		t.Error("an unknown DescriptorAlgorithm loaded")
	}
}
