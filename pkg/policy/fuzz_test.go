package policy

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader as one policy file: it must
// return a policy or an error, never panic or hang, and a policy it returns
// must answer matches and route lookups.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(envoyproxyConfig))
	f.Add([]byte(httpConfig))
	for _, name := range []string{"edge.yaml", "http.yaml"} {
		if b, err := os.ReadFile(filepath.Join("..", "..", "examples", "policy", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("domain: a\ndescriptors: &d\n  - key: a\n    descriptors: *d\n"))
	f.Add([]byte("domain: a\ndescriptors:\n  - &m\n    key: k\n    <<: *m\n"))
	f.Add([]byte("domain: a\n---\ndomain: b\n"))
	f.Add([]byte("{"))
	f.Add([]byte("http: {routes: [{name: r, path_prefix: /, hosts: ['*.example.com', 'a.b:8443', '[::1]']}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := loadFiles([]fileData{{name: "fuzz.yaml", data: data}}, LoadOptions{})
		if err != nil {
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			return
		}
		for _, d := range p.Domains {
			d.Match(entries("route", "/orders/1", "user", "u"))
			d.Match(entries("", ""))
		}
		for _, host := range []string{"", "api.example.com:8443", "[::1]:80", "a.", ":"} {
			if r := p.HTTP.Route(host, "POST", "/orders?x"); r != nil {
				r.Idempotency.StoresStatus(201)
			}
		}
		p.HTTP.IsExempt("/healthz", map[string]string{"x": "y"}, "p")
	})
}

// TestExamplePolicy keeps examples/policy (what `make run` and the image
// use) valid and meaningful.
func TestExamplePolicy(t *testing.T) {
	t.Parallel()
	p, err := Load(filepath.Join("..", "..", "examples", "policy"))
	if err != nil {
		t.Fatal(err)
	}
	edge := p.Domain("edge")
	if edge == nil || p.HTTP == nil {
		t.Fatal("want domain edge and an http section")
	}
	for _, e := range [][]string{
		{"route", "orders"}, {"route", "payments"}, {"route", "default"}, {"route", "v2-users"},
		{"method", "write"}, {"no_api_key", "true", "remote_address", "10.1.2.3"},
		{"no_api_key", "true", "remote_address", "127.0.0.1"}, {"api_key", "sha256:00"},
		{"plan", "free", "route", "reports"}, {"plan", "pro", "route", "orders"},
	} {
		if _, ok := edge.Match(entries(e...)); !ok {
			t.Errorf("descriptor %v matches no rule", e)
		}
	}
	if r := p.HTTP.Route("shop.example.com", "POST", "/orders"); r == nil || r.Idempotency == nil || !r.Idempotency.KeyRequired {
		t.Error("POST /orders: want a route with a required Idempotency-Key")
	}
	if !p.HTTP.IsExempt("/healthz", nil, "") {
		t.Error("/healthz is not exempt")
	}
}
