// Package e2e holds the end-to-end tests: HTTP through a real Envoy 1.40
// running the configurations in envoy/ (rendered with loopback addresses and
// free ports), two extauthz replicas built from ./cmd/extauthz sharing a real
// redis-server, and the sample upstream of package upstream, which counts
// executions.
//
// Run: go test -race -count=1 ./test/e2e/ (Envoy from ENVOY_BIN or PATH,
// redis-server from REDIS_SERVER_BIN or PATH). Without them the tests skip,
// or fail when CI=true. docs/envoy.md describes the harness and scenarios.
package e2e
