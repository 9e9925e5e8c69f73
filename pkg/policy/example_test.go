package policy_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

func Example() {
	dir, err := os.MkdirTemp("", "policy")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "api.yaml")
	_ = os.WriteFile(file, []byte(`
domain: api
descriptors:
  - key: route
    value: /orders*
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    rate_limits:
      - {requests_per_unit: 20, unit: second, burst: 40}
      - {requests_per_unit: 10000, period: 24h, algorithm: fixed_window}
`), 0o644)

	p, err := policy.Load(file)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, value := range []string{"/orders/42", "/items"} {
		m, ok := p.Domain("api").Match([]ratelimit.Entry{{Key: "route", Value: value}})
		fmt.Println(value, ok, m.Rule.ID)
		for _, l := range m.Rule.Limits {
			fmt.Printf("  %s: %d per %s, burst %d\n", l.Algorithm, l.Requests, l.Period, l.Burst)
		}
	}

	_ = os.WriteFile(file, []byte("domain: api\ndescriptors: [{key: route, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"), 0o644)
	_, err = policy.Load(file)
	var probs policy.Errors
	if errors.As(err, &probs) {
		fmt.Println(probs[0].Line, probs[0].Field, probs[0].Message)
	}
	// Output:
	// /orders/42 true api.route_/orders*
	//   gcra: 10 per 1m0s, burst 0
	// /items true api.route
	//   gcra: 20 per 1s, burst 40
	//   fixed_window: 10000 per 24h0m0s, burst 0
	// 2 descriptors[0].rate_limit.unit unknown unit "fortnight" (want second, minute, hour, day, week, month or year)
}
