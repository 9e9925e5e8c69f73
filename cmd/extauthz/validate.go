package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/extauthz/extauthz/pkg/policy"
)

// validateMain loads the policy at path as the server would (honouring
// EXTAUTHZ_MERGE_DOMAINS) and prints every problem (each names its file,
// line and field) to stderr, or a short summary to stdout when there is none.
// The environment is checked first by the server's own rules: a value serve
// would refuse stops validate too (exit 2, serve's lines), rather than
// being read as a default.
func validateMain(path string, stdout, stderr io.Writer) int {
	cfg, _, err := loadConfig()
	if err != nil {
		printConfigErrors(stderr, err)
		return 2
	}
	p, err := policy.LoadWith(path, policy.LoadOptions{MergeDomains: cfg.MergeDomains, DescriptorAlgorithm: cfg.descriptorAlgorithm(), RejectAccountKeys: cfg.accountKeysRefused()})
	if err != nil {
		var probs policy.Errors
		if errors.As(err, &probs) {
			for _, pr := range probs {
				fmt.Fprintln(stderr, pr.Error())
			}
			fmt.Fprintf(stderr, "%s: %d problem(s)\n", path, len(probs))
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
		}
		return 1
	}
	for _, w := range limitWarnings(p, cfg.grpcMessageLimits) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	for _, w := range lifecycleWarnings(p, cfg) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	for _, w := range globalWarnings(p, cfg) {
		fmt.Fprintln(stderr, "warning: "+w)
	}
	fmt.Fprintln(stdout, summary(p))
	for _, a := range p.Allotments() {
		fmt.Fprintln(stdout, explainAllotment(a))
	}
	return 0
}

// explainAllotment says in one line what consistency: allotment does to a
// limit (docs/algorithms.md, "Consistency").
func explainAllotment(a policy.PlacedLimit) string {
	l := a.Limit
	return fmt.Sprintf("allotment: %s: %d per %s (%s): with Redis each replica leases slices of this budget and decides "+
		"from them locally; the fleet never admits more than the limit and may admit fewer, by at most the slices "+
		"leased and not used (the memory store decides it exactly)", a.Where, l.Requests, l.Period, l.Algorithm.OrDefault())
}

// globalWarnings names each scope: global limit that this configuration
// decides in the region's store alone (no EXTAUTHZ_GLOBAL_REDIS_URL).
func globalWarnings(p *policy.Policy, cfg Config) []string {
	if cfg.GlobalRedisURL != "" {
		return nil
	}
	var out []string
	for _, g := range p.Globals() {
		out = append(out, fmt.Sprintf("%s: scope global without EXTAUTHZ_GLOBAL_REDIS_URL is decided in this region's store "+
			"alone: every region admits the whole limit (docs/multi-region.md)", g.Where))
	}
	return out
}

// Limits validate checks routes against: gRPC message sizes from the
// environment (defaults when unset) and the shipped Envoy configs' buffer
// limit (envoy/*.yaml).
const (
	// shippedEnvoyBuffer is per_connection_buffer_limit_bytes and ext_authz
	// max_request_bytes in envoy/front-proxy.yaml and envoy/sidecar.yaml.
	shippedEnvoyBuffer = 1 << 20
	// grpcHeadroom covers a message's headers and framing beside its body.
	grpcHeadroom = 64 << 10
)

// limitWarnings lists routes whose idempotency caps exceed what the gRPC
// limits or the shipped Envoy buffers can carry.
func limitWarnings(p *policy.Policy, lim func() (int, int)) []string {
	if p.HTTP == nil {
		return nil
	}
	recv, send := lim()
	var out []string
	for _, r := range p.HTTP.Routes {
		id := r.Idempotency
		if id == nil {
			continue
		}
		at := fmt.Sprintf("route %q: idempotency.max_body_bytes %d", r.Name, id.MaxBodyBytes)
		if id.MaxBodyBytes+grpcHeadroom > int64(send) {
			out = append(out, fmt.Sprintf("%s: an inline replay is one gRPC message, above EXTAUTHZ_GRPC_MAX_SEND_BYTES %d; lower it or raise the limit", at, send))
		}
		if id.MaxBodyBytes+grpcHeadroom > int64(recv) {
			out = append(out, fmt.Sprintf("%s: a BUFFERED response body is one gRPC message, above EXTAUTHZ_GRPC_MAX_RECV_BYTES %d; use STREAMED or raise the limit", at, recv))
		}
		if id.MaxBodyBytes > shippedEnvoyBuffer {
			out = append(out, fmt.Sprintf("%s: above the shipped Envoy configs' buffer limit (%d bytes, per_connection_buffer_limit_bytes): a BUFFERED body that large fails in Envoy (500); raise the Envoy limits too", at, shippedEnvoyBuffer))
		}
	}
	return out
}

// summary describes a loaded policy in one line.
func summary(p *policy.Policy) string {
	domains := make([]string, 0, len(p.Domains))
	for name := range p.Domains {
		domains = append(domains, name)
	}
	sort.Strings(domains)
	routes := 0
	if p.HTTP != nil {
		routes = len(p.HTTP.Routes)
	}
	return fmt.Sprintf("ok: %d file(s), %d domain(s) [%s], %d http route(s)",
		len(p.Files), len(domains), strings.Join(domains, ", "), routes)
}
