package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// tally is one worker's results; merged after the run, so no locking.
type tally struct {
	ok, over, failed int64
	latencies        []time.Duration
	firstErr         error
}

// outcome is how the service answered one call.
type outcome int

const (
	outcomeOK outcome = iota
	outcomeOver
	outcomeOther
)

// caller makes call number i (its key is i modulo -keys).
type caller func(ctx context.Context, i int) (outcome, error)

// drive runs cfg.concurrency workers over one shared connection (as Envoy
// multiplexes calls over HTTP/2) for cfg.warmup unrecorded, then until
// cfg.duration has passed.
func drive(ctx context.Context, cfg config) (report, error) {
	call, closeConn, err := newCaller(cfg)
	if err != nil {
		return report{}, err
	}
	defer closeConn()
	if cfg.warmup > 0 {
		if _, err := runFor(ctx, cfg, cfg.warmup, call); err != nil {
			return report{}, err
		}
	}
	return runFor(ctx, cfg, cfg.duration, call)
}

// newCaller opens the -client's connection and returns the -api's caller
// over it, and what closes the connection.
func newCaller(cfg config) (caller, func(), error) {
	if cfg.client == clientH2 {
		return newH2Caller(cfg)
	}
	creds, err := cfg.tls.transportCredentials()
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(cfg.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, nil, fmt.Errorf("dial %s: %w", cfg.addr, err)
	}
	call := rlsCaller(conn, cfg)
	if cfg.api == apiAuthz {
		call = authzCaller(conn, cfg)
	}
	return call, func() { _ = conn.Close() }, nil
}

// runFor runs the workers for d and summarizes what they measured.
func runFor(ctx context.Context, cfg config, d time.Duration, call caller) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tallies := make([]tally, cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range tallies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx, call, w, cfg, &tallies[w])
		}()
	}
	wg.Wait()
	return summarize(tallies, time.Since(start)), nil
}

// work calls until ctx ends, walking the keys from its own offset.
func work(ctx context.Context, call caller, w int, cfg config, t *tally) {
	i := w * cfg.keys / cfg.concurrency
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		begin := time.Now()
		got, err := call(callCtx, i)
		took := time.Since(begin)
		cancel()
		i++
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return // the run ended while this call was in flight
			}
			t.failed++
			if t.firstErr == nil {
				t.firstErr = err
			}
		case got == outcomeOver:
			t.over++
		case got == outcomeOK:
			t.ok++
		default:
			t.failed++
		}
		t.latencies = append(t.latencies, took)
	}
}

// rlsCaller calls ShouldRateLimit over grpc-go with one descriptor per key.
func rlsCaller(conn grpc.ClientConnInterface, cfg config) caller {
	c := rlsv3.NewRateLimitServiceClient(conn)
	reqs := buildRequests(cfg)
	return func(ctx context.Context, i int) (outcome, error) {
		resp, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil {
			return outcomeOther, err
		}
		return rlsOutcome(resp.GetOverallCode())
	}
}

// rlsOutcome classifies a ShouldRateLimit response by its overall code.
func rlsOutcome(code rlsv3.RateLimitResponse_Code) (outcome, error) {
	switch code {
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return outcomeOver, nil
	case rlsv3.RateLimitResponse_OK:
		return outcomeOK, nil
	}
	return outcomeOther, fmt.Errorf("overall_code %s", code)
}

// buildRequests prepares one request per distinct key, so the loop itself
// allocates nothing but the call.
func buildRequests(cfg config) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, cfg.keys)
	for k := range reqs {
		entries := make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, len(cfg.entries)+1)
		for _, e := range cfg.entries {
			entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: cfg.keyName, Value: "k" + strconv.Itoa(k)})
		reqs[k] = &rlsv3.RateLimitRequest{
			Domain:      cfg.domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries}},
			HitsAddend:  uint32(cfg.hits),
		}
	}
	return reqs
}
