package policy

import (
	"slices"
	"strings"
	"testing"
)

const hostConfig = `
http:
  routes:
    - name: orders-a
      hosts: [Orders.Shop.svc.cluster.local, orders]
      path_prefix: /orders
    - name: wild
      hosts: ["*.Example.com"]
      path_prefix: /orders
    - name: port
      hosts: ["api.test:8443", "[::1]:9000"]
      path_prefix: /orders
    - name: v6
      hosts: ["[::1]"]
      path_prefix: /orders
    - name: empty-list
      hosts: []
      path_prefix: /any
    - name: rest
      path_prefix: /
`

func TestRouteHosts(t *testing.T) {
	t.Parallel()
	h := mustLoad(t, "http.yaml", hostConfig).HTTP
	if got := h.Routes[0].Hosts; !slices.Equal(got, []string{"orders.shop.svc.cluster.local", "orders"}) {
		t.Errorf("Hosts %v, want them lower-cased in order", got)
	}
	tests := []struct {
		host, path, want string
	}{
		{"orders.shop.svc.cluster.local", "/orders", "orders-a"},
		{"ORDERS.shop.SVC.cluster.local", "/orders", "orders-a"},      // case-insensitive
		{"orders.shop.svc.cluster.local:8080", "/orders", "orders-a"}, // port ignored: pattern has none
		{"orders.shop.svc.cluster.local.", "/orders", "orders-a"},     // absolute name
		{"orders:80", "/orders", "orders-a"},
		{"orders.other.svc.cluster.local", "/orders", "rest"},
		{"xorders.shop.svc.cluster.local", "/orders", "rest"},
		{"a.example.com", "/orders", "wild"},
		{"a.b.EXAMPLE.com:443", "/orders", "wild"}, // more than one label
		{"example.com", "/orders", "rest"},         // the wildcard needs a label
		{".example.com", "/orders", "rest"},
		{"a..example.com", "/orders", "rest"},
		{"aexample.com", "/orders", "rest"},
		{"a.example.com.evil", "/orders", "rest"},
		{"api.test:8443", "/orders", "port"},
		{"API.test:8443", "/orders", "port"},
		{"api.test", "/orders", "rest"},     // pattern has a port, request none
		{"api.test:443", "/orders", "rest"}, // another port
		{"[::1]:9000", "/orders", "port"},
		{"[::1]:9001", "/orders", "v6"},
		{"[::1]", "/orders", "v6"},
		{"", "/orders", "rest"}, // no host: only routes without hosts
		{"k.example.com", "/orders", "wild"},
		{"\u212a.example.com", "/orders", "wild"},                 // non-ASCII first label: still one label
		{"orders.shop.svc.cluster.loca\u212a", "/orders", "rest"}, // no Unicode folding
		{"whatever", "/any", "empty-list"},                        // hosts: [] = every host
		{"orders.shop.svc.cluster.local", "/other", "rest"},
	}
	for _, tt := range tests {
		got := ""
		if r := h.Route(tt.host, "POST", tt.path); r != nil {
			got = r.Name
		}
		if got != tt.want {
			t.Errorf("Route(%q, POST, %s) = %q, want %q", tt.host, tt.path, got, tt.want)
		}
	}
	if !h.Routes[1].Matches("x.example.com:1", "GET", "/orders?a=b") || h.Routes[1].Matches("example.com", "GET", "/orders") {
		t.Error("Route.Matches disagrees with the hosts list")
	}
	var none *Route
	if none.Matches("a.example.com", "GET", "/") {
		t.Error("nil Route matched")
	}
}

func TestRouteHostsValidation(t *testing.T) {
	t.Parallel()
	hosts := func(list string) string {
		return "http:\n  routes:\n    - name: r\n      path_prefix: /r\n      hosts: " + list + "\n"
	}
	tests := []struct {
		name, list, field, msg string
	}{
		{"empty entry", "['']", "hosts[0]", "must not be empty"},
		{"null entry", "[a.com, ~]", "hosts[1]", "must not be empty"},
		{"inner wildcard", "['a*b']", "hosts[0]", "bad pattern"},
		{"wildcard without dot", "['*example.com']", "hosts[0]", "bad pattern"},
		{"second wildcard", "['*.*.example.com']", "hosts[0]", "bad pattern"},
		{"trailing wildcard", "['example.*']", "hosts[0]", "bad pattern"},
		{"bare wildcard label", "['*.']", "hosts[0]", "bad pattern"},
		{"lone star", "['*']", "hosts[0]", "bad pattern"},
		{"lone star with port", "['*:80']", "hosts[0]", "bad pattern"},
		{"whitespace", "['a .com']", "hosts[0]", "whitespace"},
		{"leading whitespace", "[' a.com']", "hosts[0]", "whitespace"},
		{"duplicate", "[a.com, b.com, A.COM]", "hosts[2]", `host "a.com" is already listed at http.routes[0].hosts[0]`},
		{"bad port", "['a.com:http']", "hosts[0]", "bad port"},
		{"port out of range", "['a.com:65536']", "hosts[0]", "bad port"},
		{"empty port", "['a.com:']", "hosts[0]", "bad port"},
		{"empty label", "['a..com']", "hosts[0]", "empty label"},
		{"trailing dot", "['a.com.']", "hosts[0]", "must not end with a dot"},
		{"url", "['https://a.com']", "hosts[0]", "is a URL"},
		{"bad character", "['a!.com']", "hosts[0]", "bad host name"},
		{"bad IPv6", "['[zz]']", "hosts[0]", "bad IPv6 literal"},
		{"IPv6 with junk", "['[::1]x']", "hosts[0]", "bad IPv6 literal"},
		{"IPv6 unclosed", "['[::1']", "hosts[0]", "bad IPv6 literal"},
		{"not a list", "a.com", "hosts", "expected a list"},
		{"not a string", "[{a: b}]", "hosts[0]", "expected a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			msg, probs := loadErr(t, "http.yaml", hosts(tt.list))
			field := "http.routes[0]." + tt.field
			if len(probs) != 1 || !strings.Contains(msg, "http.yaml:5: "+field+": ") || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q\nwant one problem in http.yaml:5 at %q saying %q", msg, field, tt.msg)
			}
		})
	}
}

func BenchmarkRouteHosts(b *testing.B) {
	p, err := loadFiles([]fileData{{name: "http.yaml", data: []byte(hostConfig)}}, LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.HTTP.Route("A.B.example.com:443", "POST", "/orders/1?x=1")
	}
}
