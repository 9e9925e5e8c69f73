package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy/rlqs"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotaredis"
)

// withRLQS adds the Rate Limit Quota Service to services, unless building
// them failed (err, passed through). Its streams live as long as their
// Envoy: they are ended when ctx ends (the shutdown signal), so that they
// move to other replicas during the drain delay instead of holding up the
// graceful stop.
func withRLQS(ctx context.Context, services []grpcService, err error, cfg Config, store ratelimit.Store, tr tracer, current func() *policy.Policy, reg prometheus.Registerer, log *slog.Logger) ([]grpcService, error) {
	if err != nil {
		return nil, err
	}
	quotas, err := newRLQS(cfg, store, tr, current, reg, log)
	if err != nil {
		return nil, fmt.Errorf("rlqs: %w", err)
	}
	context.AfterFunc(ctx, quotas.Drain)
	return append(services, quotas), nil
}

// newRLQS builds the Rate Limit Quota Service. With Redis the demands are
// shared by every replica (quotaredis, on the rate-limit store's client), so
// each computes the same shares whichever replica an Envoy's stream lands
// on; without, they are per process, and each replica divides every budget
// among its own streams only. EXTAUTHZ_FAILURE_MODE decides what buckets get
// while Redis fails: open re-sends the last assignment, closed DENY_ALL.
func newRLQS(cfg Config, store ratelimit.Store, tr tracer, current func() *policy.Policy, reg prometheus.Registerer, log *slog.Logger) (*rlqs.Server, error) {
	var demands quota.DemandStore
	kind := "memory"
	if rb, ok := store.(*redisBacked); ok {
		rs, err := quotaredis.New(rb.client, quotaredis.Options{Prefix: cfg.KeyPrefix})
		if err != nil {
			return nil, fmt.Errorf("EXTAUTHZ_KEY_PREFIX: %w", err)
		}
		demands, kind = rs, "redis"
	} else {
		ms, err := quota.NewMemoryStore(quota.MemoryOptions{})
		if err != nil {
			return nil, err
		}
		demands = ms
	}
	alloc, err := quota.NewAllocator(demands, quota.Config{})
	if err != nil {
		return nil, err
	}
	log.Info("rlqs demand store", "kind", kind, "failure_mode", cfg.FailureMode)
	o := rlqs.Options{
		Policy: current, Allocator: alloc, Registerer: reg, Logger: log,
		// Charged usage goes through the same (traced) store RLS uses.
		Limits: tr.rateLimit(cfg, store), TenantKey: cfg.RLSTenantKey,
		FailClosed: cfg.FailureMode == "closed",
	}
	if rb, ok := store.(*redisBacked); ok {
		if rg, ok := rb.Store.(*regionBacked); ok {
			// Global limits: RLQS divides the region's share (store_region.go).
			o.Regional = rg.Store
		}
	}
	if tr.on() {
		o.TracerProvider = tr.provider
	}
	return rlqs.New(o)
}
