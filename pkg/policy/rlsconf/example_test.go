package rlsconf_test

import (
	"fmt"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/policy/rlsconf"
)

func ExampleDocuments() {
	docs, _ := rlsconf.Documents([]*rlsconfv3.RateLimitConfig{{
		Name:   "first-listener",
		Domain: "first-listener",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "rule-0-match-0", Value: "rule-0-match-0",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 5},
		}},
	}})
	fmt.Println(docs[0].Name)
	fmt.Print(string(docs[0].Data))
	_, err := policy.LoadDocuments(docs, policy.LoadOptions{})
	fmt.Println("valid:", err == nil)
	// Output:
	// xds:RateLimitConfig/first-listener
	// domain: first-listener
	// descriptors:
	//     - key: rule-0-match-0
	//       value: rule-0-match-0
	//       rate_limit:
	//         unit: second
	//         requests_per_unit: 5
	// valid: true
}
