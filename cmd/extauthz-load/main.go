// Command extauthz-load drives Envoy's rate limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) at a fixed
// concurrency for a bounded duration and prints throughput, latency
// percentiles and the count of OK, OVER_LIMIT and failed calls.
//
// With -api authz it calls ext_authz Check instead (HTTP GET, the -key
// header taking one of -keys values). -warmup runs calls first, unrecorded.
//
// -client picks the gRPC client: grpc (grpc-go, the default) or h2, a lean
// client of its own over one HTTP/2 connection: requests and their header
// block encoded once (the headers Envoy 1.40 sends, indexed as it indexes
// them, grpc-timeout from -timeout), frames of many calls written in one
// syscall as Envoy's event loop does, under a third of grpc-go's CPU per
// call, so that on a machine shared with the server the tool measures the
// server.
//
// Each call carries one descriptor whose last entry takes one of -keys
// distinct values, picked round-robin per worker, so -keys 1 is one hot key
// and -keys 10000 spreads the load:
//
//	extauthz-load -addr 127.0.0.1:9001 -domain bench -concurrency 64 -duration 10s -keys 10000
//
// -tls-ca turns on TLS for the grpc client (verifying the server against
// that CA, by -tls-server-name if given); -tls-cert and -tls-key add a
// client certificate for mTLS. -addr may be unix:///path for a socket.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Client names for -client.
const (
	clientGRPC = "grpc"
	clientH2   = "h2"
)

// maxDuration bounds a run so a typo cannot load a shared machine for hours.
const maxDuration = 10 * time.Minute

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "extauthz-load:", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := drive(ctx, cfg)
	if err != nil {
		return err
	}
	return rep.write(out, cfg)
}

// config is one run's settings.
type config struct {
	addr        string
	domain      string
	entries     [][2]string // fixed leading descriptor entries
	keyName     string
	keys        int
	hits        uint
	concurrency int
	duration    time.Duration
	timeout     time.Duration
	warmup      time.Duration
	api         string
	client      string
	path        string
	jsonOut     bool
	tls         tlsFlags
}

func parseFlags(args []string) (config, error) {
	var c config
	var entries string
	fs := flag.NewFlagSet("extauthz-load", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9001", "gRPC address of the rate limit service")
	fs.StringVar(&c.domain, "domain", "bench", "rate limit domain")
	fs.StringVar(&entries, "entries", "", "fixed descriptor entries before the varying one, as k=v,k=v")
	fs.StringVar(&c.keyName, "key", "user", "descriptor key of the varying entry")
	fs.IntVar(&c.keys, "keys", 1, "distinct values of the varying entry (1 = one hot key)")
	fs.UintVar(&c.hits, "hits", 0, "hits_addend per request (0 leaves it unset, meaning 1)")
	fs.IntVar(&c.concurrency, "concurrency", 16, "concurrent callers")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to run (at most 10m)")
	fs.DurationVar(&c.timeout, "timeout", time.Second, "deadline of each call")
	fs.DurationVar(&c.warmup, "warmup", 0, "calls made before the measured run, not recorded (at most 10m)")
	fs.StringVar(&c.api, "api", apiRLS, "rls: ShouldRateLimit; authz: ext_authz Check of GET -path with header -key set to one of -keys values")
	fs.StringVar(&c.client, "client", clientGRPC, "grpc: the grpc-go client; h2: a lean gRPC-over-HTTP/2 client that batches writes, as Envoy does")
	fs.StringVar(&c.path, "path", "/bench", "request path for -api authz")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object instead of text")
	c.tls.flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.entries, err = parseEntries(entries); err != nil {
		return c, err
	}
	switch {
	case c.keys < 1:
		err = errors.New("-keys must be at least 1")
	case c.concurrency < 1 || c.concurrency > 10000:
		err = errors.New("-concurrency must be between 1 and 10000")
	case c.duration <= 0 || c.duration > maxDuration:
		err = fmt.Errorf("-duration must be in (0, %s]", maxDuration)
	case c.warmup < 0 || c.warmup > maxDuration:
		err = fmt.Errorf("-warmup must be in [0, %s]", maxDuration)
	case c.api != apiRLS && c.api != apiAuthz:
		err = fmt.Errorf("-api must be %s or %s", apiRLS, apiAuthz)
	case c.client != clientGRPC && c.client != clientH2:
		err = fmt.Errorf("-client must be %s or %s", clientGRPC, clientH2)
	case c.timeout <= 0:
		err = errors.New("-timeout must be positive")
	case c.keyName == "" || c.domain == "":
		err = errors.New("-key and -domain must not be empty")
	default:
		err = c.tls.check(c.client)
	}
	return c, err
}

func parseEntries(s string) ([][2]string, error) {
	if s == "" {
		return nil, nil
	}
	var out [][2]string
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-entries: %q is not k=v", kv)
		}
		out = append(out, [2]string{k, v})
	}
	return out, nil
}
