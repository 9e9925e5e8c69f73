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
	"google.golang.org/grpc/credentials/insecure"
)

// tally is one worker's results; merged after the run, so no locking.
type tally struct {
	ok, over, failed int64
	latencies        []time.Duration
	firstErr         error
}

// drive runs cfg.concurrency workers over one shared connection (as Envoy
// multiplexes calls over HTTP/2) until cfg.duration has passed.
func drive(ctx context.Context, cfg config) (report, error) {
	conn, err := grpc.NewClient(cfg.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return report{}, fmt.Errorf("dial %s: %w", cfg.addr, err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	reqs := buildRequests(cfg)

	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	tallies := make([]tally, cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range tallies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(ctx, client, reqs, w, cfg, &tallies[w])
		}()
	}
	wg.Wait()
	return summarize(tallies, time.Since(start)), nil
}

// work calls until ctx ends, walking the request list from its own offset.
func work(ctx context.Context, c rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest, w int, cfg config, t *tally) {
	i := w * len(reqs) / cfg.concurrency
	for ctx.Err() == nil {
		req := reqs[i%len(reqs)]
		i++
		callCtx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
		begin := time.Now()
		resp, err := c.ShouldRateLimit(callCtx, req)
		took := time.Since(begin)
		cancel()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return // the run ended while this call was in flight
			}
			t.failed++
			if t.firstErr == nil {
				t.firstErr = err
			}
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
			t.over++
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			t.ok++
		default:
			t.failed++
			if t.firstErr == nil {
				t.firstErr = fmt.Errorf("overall_code %s", resp.GetOverallCode())
			}
		}
		t.latencies = append(t.latencies, took)
	}
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
