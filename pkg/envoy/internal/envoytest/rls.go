package envoytest

import (
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Desc builds a descriptor from key, value pairs.
func Desc(kv ...string) *commonrlv3.RateLimitDescriptor {
	d := &commonrlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonrlv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// Request is a ShouldRateLimit request for domain with descs.
func Request(domain string, descs ...*commonrlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// EdgePolicy is in envoyproxy/ratelimit's format, unchanged: nested
// descriptors, a key-only default, a wildcard value.
const EdgePolicy = `
domain: edge
descriptors:
  - key: source_cluster
    value: proxy
    descriptors:
      - key: destination_cluster
        rate_limit: {unit: minute, requests_per_unit: 3}
      - key: destination_cluster
        value: "mongo*"
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: destination_cluster
        value: mysql
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 5}
`
