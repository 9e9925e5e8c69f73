package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/randtoken"
	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/pkg/ratelimit"
	"github.com/extauthz/extauthz/pkg/ratelimit/region"
)

// topology is the region settings as package region takes them.
func (c Config) topology() region.Topology {
	solo := c.RegionSolo
	if solo == 0 {
		solo = 8 * c.RegionExchangeInterval
	}
	return region.Topology{Region: c.Region, Regions: c.regionList(), Interval: c.RegionExchangeInterval,
		Lease: c.RegionLease, Solo: solo}
}

// regionList is EXTAUTHZ_REGIONS split at commas, spaces trimmed.
func (c Config) regionList() []string {
	var out []string
	for _, r := range strings.Split(c.Regions, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// regionParallel bounds the keys one replica exchanges at once: each
// exchange waits on WAN round trips, not on CPU.
const regionParallel = 32

// regionStack puts package region's Store in front of store when
// EXTAUTHZ_GLOBAL_REDIS_URL is set: limits with scope: global are decided
// from this region's share in local (the region's Redis), and an exchanger
// goroutine reports demand to the global Redis until Close.
func regionStack(store ratelimit.Store, local redis.UniversalClient, cfg Config, deps storeDeps) (ratelimit.Store, error) {
	if cfg.GlobalRedisURL == "" {
		return store, nil
	}
	// The global store is across a WAN: its timeouts are the exchange's
	// (bounded by the lease), never a request's.
	client, err := redisclient.New(redisclient.Options{
		URL: cfg.GlobalRedisURL, Cluster: cfg.GlobalRedisCluster,
		DialTimeout: cfg.RegionLease, ReadTimeout: cfg.RegionLease, WriteTimeout: cfg.RegionLease,
	})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_GLOBAL_REDIS_URL: %w", err)
	}
	g, err := region.NewGlobal(client, cfg.KeyPrefix)
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	l, err := region.NewLocal(local, cfg.KeyPrefix)
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	ex, err := region.NewExchanger(cfg.topology(), l, g, randtoken.Hex(8))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("EXTAUTHZ_REGION*: %w", err), client.Close())
	}
	rs, err := region.NewStore(store, ex)
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	ctx, cancel := context.WithCancel(context.Background())
	rb := &regionBacked{Store: rs, inner: store, global: client, cancel: cancel, done: make(chan struct{})}
	steps, err := regionMetrics(deps.Registerer, ex)
	if err != nil {
		return nil, errors.Join(err, client.Close())
	}
	onStep := recordStep(ctx, steps, deps)
	go func() {
		defer close(rb.done)
		ex.Run(ctx, regionParallel, onStep)
	}()
	logRegionSettings(cfg, deps)
	return rb, nil
}

// recordStep counts each exchange step by result and logs it: every step at
// debug level, failures also as a warning throttled to one line per 10 s.
func recordStep(ctx context.Context, steps regionSteps, deps storeDeps) func(string, region.Outcome, error) {
	warn := throttledWarn(deps, 10*time.Second)
	return func(key string, out region.Outcome, err error) {
		switch {
		case ctx.Err() != nil:
		case err != nil:
			steps.failed.Inc()
			deps.Logger.Debug("region exchange failed", "key", key, "error", err.Error())
			warn(err)
		case out.Owner:
			steps.ok.Inc()
			deps.Logger.Debug("region exchange", "key", key, "demand", out.Demand, "target", out.Target,
				"window", out.Grants.Window, "budget", out.Grants.Budget, "next", out.Grants.Next,
				"early", out.Early, "retry", out.Retry)
		default:
			steps.notOwner.Inc()
		}
	}
}

// logRegionSettings logs the settings of global limits, with a warning when
// the lease is too short for RLQS budgets of them.
func logRegionSettings(cfg Config, deps storeDeps) {
	if cfg.RegionLease < rlqsHorizon+cfg.RegionExchangeInterval {
		deps.Logger.Warn("EXTAUTHZ_REGION_LEASE is shorter than three RLQS ticks and an exchange interval: "+
			"RLQS budgets of global limits shrink towards the floor near every window's end (docs/multi-region.md)",
			"lease", cfg.RegionLease, "want_at_least", rlqsHorizon+cfg.RegionExchangeInterval)
	}
	deps.Logger.Info("global limits", "region", cfg.Region, "regions", cfg.regionList(),
		"exchange_interval", cfg.RegionExchangeInterval, "lease", cfg.RegionLease, "solo_interval", cfg.topology().Solo,
		"global_cluster", cfg.GlobalRedisCluster)
}

// rlqsHorizon is how long an RLQS assignment of a global limit may be
// enforced (three ticks of pkg/envoy/rlqs's 1 s): the next window's budget
// is reserved that long before it starts, so the region's grant for it must
// be there by then.
const rlqsHorizon = 3 * time.Second

// regionSteps counts exchange steps by result.
type regionSteps struct{ ok, notOwner, failed prometheus.Counter }

// regionMetrics registers extauthz_region_exchanges_total and
// extauthz_region_keys.
func regionMetrics(reg prometheus.Registerer, ex *region.Exchanger) (regionSteps, error) {
	exchanges := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_region_exchanges_total",
		Help: "Exchange steps of global limits' keys with the global Redis, by result: ok, not_owner (another replica of the region exchanges the key), failed.",
	}, []string{"result"})
	keys := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "extauthz_region_keys",
		Help: "Keys of global limits this replica follows in the exchange.",
	}, func() float64 { return float64(ex.Tracked()) })
	if reg != nil {
		for _, c := range []prometheus.Collector{exchanges, keys} {
			if err := reg.Register(c); err != nil {
				return regionSteps{}, fmt.Errorf("region metrics: %w", err)
			}
		}
	}
	return regionSteps{ok: exchanges.WithLabelValues("ok"), notOwner: exchanges.WithLabelValues("not_owner"),
		failed: exchanges.WithLabelValues("failed")}, nil
}

// throttledWarn logs an exchange failure at most once per every: during a
// partition every key fails every interval.
func throttledWarn(deps storeDeps, every time.Duration) func(error) {
	var mu sync.Mutex
	var last time.Time
	var dropped int
	return func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if now := time.Now(); now.Sub(last) >= every {
			deps.Logger.Warn("global limit exchange failed: regions keep their shares until they lapse, then their floors",
				"error", err, "failures_since_last_log", dropped)
			last, dropped = now, 0
			return
		}
		dropped++
	}
}

// regionBacked stops the exchanger and closes the global client on Close,
// and passes readiness through to the store it wraps.
type regionBacked struct {
	*region.Store
	inner  ratelimit.Store
	global redis.UniversalClient
	cancel func()
	done   chan struct{}
}

func (r *regionBacked) Ready(ctx context.Context) error {
	if rd, ok := r.inner.(readiness); ok {
		return rd.Ready(ctx)
	}
	return nil
}

func (r *regionBacked) Close() error {
	r.cancel()
	<-r.done
	return errors.Join(r.Store.Close(), r.global.Close())
}
