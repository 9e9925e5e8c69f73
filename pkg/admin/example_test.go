package admin_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/admin"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	idemmem "github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit/memstore"
)

// The API over the memory stores and the real servers: the state of
// tenant acme's orders limit, read without charging it.
func Example() {
	dir, _ := os.MkdirTemp("", "admin-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policy.yaml")
	_ = os.WriteFile(path, []byte("domain: edge\ndescriptors:\n  - key: route\n    value: orders\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"), 0o600)
	p, err := policy.Load(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	limits, _ := memstore.New(memstore.Options{})
	defer limits.Close()
	records := idemmem.New(idemmem.Config{})
	m, _ := envoy.NewMetrics(prometheus.NewRegistry())
	events, _ := authz.NewIdempotencyMetrics(prometheus.NewRegistry())
	r, _ := rls.NewRLS(limits, src, m)
	az, _ := authz.NewAuthz(limits, records, src, m, events)
	api, err := admin.New(admin.Options{RLS: r, HTTP: az, Limits: limits, Records: records, Policies: src,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		fmt.Println(err)
		return
	}
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1:9003/v1/ratelimit/state?domain=edge&descriptor=tenant=acme,route=orders", nil))
	fmt.Println(rec.Code)
	fmt.Print(rec.Body)
	// Output:
	// 200
	// {
	//   "domain": "edge",
	//   "known_domain": true,
	//   "descriptors": [
	//     {
	//       "descriptor": "tenant=acme,route=orders",
	//       "outcome": "ok",
	//       "rule": "edge.route_orders",
	//       "rule_id": "edge.route_orders",
	//       "hits": 1,
	//       "counter": "acme|edge|route=orders",
	//       "limits": [
	//         {
	//           "name": "edge.route_orders",
	//           "algorithm": "gcra",
	//           "requests": 100,
	//           "period_seconds": 60,
	//           "key": "acme|edge|route=orders:gcra:60000",
	//           "limit": 100,
	//           "remaining": 100,
	//           "reset_seconds": 0
	//         }
	//       ]
	//     }
	//   ],
	//   "would_answer": "OK"
	// }
}
