package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// Config is the service's configuration, read from EXTAUTHZ_* environment
// variables by envconfig. Field comments state the defaults; the README's
// table lists the same variables and must stay in step with this struct.
type Config struct {
	// GRPCAddr serves RLS, ext_authz, ext_proc, health and reflection.
	GRPCAddr string `envconfig:"GRPC_ADDR" default:":9001"`
	// HTTPAddr serves /metrics, /healthz and /readyz.
	HTTPAddr string `envconfig:"HTTP_ADDR" default:":9090"`
	// Config is the policy file or directory; empty uses no policy.
	Config string `envconfig:"CONFIG" default:""`
	// LogLevel is debug, info, warn or error.
	LogLevel string `envconfig:"LOG_LEVEL" default:"info"`
	// ShutdownTimeout bounds the drain of in-flight calls on SIGTERM.
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"10s"`
	// RLSTenantKey is the descriptor entry key read as the tenant; empty disables.
	RLSTenantKey string `envconfig:"RLS_TENANT_KEY" default:"tenant"`

	// RedisURL selects the Redis store (redis:// or rediss://); empty uses the embedded memory store.
	RedisURL string `envconfig:"REDIS_URL" default:""`
	// RedisCluster treats the URL's hosts as Redis Cluster seed nodes.
	RedisCluster bool `envconfig:"REDIS_CLUSTER" default:"false"`
	// RedisPoolSize is the connection pool size per node; 0 is go-redis's default.
	RedisPoolSize int `envconfig:"REDIS_POOL_SIZE" default:"0"`
	// RedisMaxBatch > 1 coalesces concurrent decisions per Redis node into
	// pipelines of at most that many (redisstore.Options.MaxBatch); 1, the
	// default (and 0), sends each decision on its own (docs/benchmarks-redis.md).
	RedisMaxBatch int `envconfig:"REDIS_MAX_BATCH" default:"1"`
	// RedisDialTimeout bounds connecting to Redis.
	RedisDialTimeout time.Duration `envconfig:"REDIS_DIAL_TIMEOUT" default:"200ms"`
	// RedisReadTimeout bounds one Redis read.
	RedisReadTimeout time.Duration `envconfig:"REDIS_READ_TIMEOUT" default:"50ms"`
	// RedisWriteTimeout bounds one Redis write.
	RedisWriteTimeout time.Duration `envconfig:"REDIS_WRITE_TIMEOUT" default:"50ms"`
	// RedisCallTimeout bounds one rate-limit decision's Redis call (a whole
	// pipeline); past it the failure mode answers. Keep it below Envoy's
	// ratelimit filter timeout so that the service, not Envoy, decides.
	RedisCallTimeout time.Duration `envconfig:"REDIS_CALL_TIMEOUT" default:"50ms"`
	// IdempotencyStoreTimeout bounds one Idempotency-Key store call (0: 100ms); past it
	// the route's idempotency failure_mode answers. Keep it below Envoy's
	// ext_authz timeout and ext_proc message_timeout.
	IdempotencyStoreTimeout time.Duration `envconfig:"IDEMPOTENCY_STORE_TIMEOUT" default:"100ms"`
	// RedisTLSInsecureSkipVerify skips server certificate checks (rediss:// only; testing).
	RedisTLSInsecureSkipVerify bool `envconfig:"REDIS_TLS_INSECURE_SKIP_VERIFY" default:"false"`
	// RedisTLSCAFile is a PEM bundle used to verify the Redis server (rediss://).
	RedisTLSCAFile string `envconfig:"REDIS_TLS_CA_FILE" default:""`
	// FailureMode is open (fall back to the in-process store) or closed (deny) when Redis fails.
	FailureMode string `envconfig:"FAILURE_MODE" default:"open"`
	// KeyPrefix starts every Redis key.
	KeyPrefix string `envconfig:"KEY_PREFIX" default:"xa"`
	// LocalCache answers keys known to be over limit without Redis until their reset.
	LocalCache bool `envconfig:"LOCAL_CACHE" default:"true"`
	// MemoryMaxKeys bounds the states the embedded memory store keeps (the
	// soonest-expiring are evicted beyond it); 0 is unbounded.
	MemoryMaxKeys int `envconfig:"MEMORY_MAX_KEYS" default:"1000000"`
	// DebugAddr serves Go's pprof profiles (/debug/pprof/); empty (the
	// default) serves none. Loopback addresses only: see debug.go.
	DebugAddr string `envconfig:"DEBUG_ADDR" default:""`
}

// loadConfig reads the EXTAUTHZ_* environment and validates it.
func loadConfig() (Config, error) {
	var cfg Config
	if err := envconfig.Process("EXTAUTHZ", &cfg); err != nil {
		return cfg, fmt.Errorf("configuration: %w", err)
	}
	return cfg, cfg.Validate()
}

// Validate returns every problem of c, each naming its variable.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("EXTAUTHZ_"+name+": "+format, args...))
	}
	if c.GRPCAddr == "" {
		bad("GRPC_ADDR", "must not be empty")
	}
	if c.HTTPAddr == "" {
		bad("HTTP_ADDR", "must not be empty")
	}
	if _, err := c.slogLevel(); err != nil {
		bad("LOG_LEVEL", "%v", err)
	}
	if c.ShutdownTimeout <= 0 {
		bad("SHUTDOWN_TIMEOUT", "must be positive, got %s", c.ShutdownTimeout)
	}
	if c.RedisCallTimeout < 0 {
		bad("REDIS_CALL_TIMEOUT", "must not be negative, got %s", c.RedisCallTimeout)
	}
	if c.IdempotencyStoreTimeout < 0 {
		bad("IDEMPOTENCY_STORE_TIMEOUT", "must not be negative, got %s", c.IdempotencyStoreTimeout)
	}
	if c.MemoryMaxKeys < 0 {
		bad("MEMORY_MAX_KEYS", "must not be negative, got %d", c.MemoryMaxKeys)
	}
	if c.RedisMaxBatch < 0 {
		bad("REDIS_MAX_BATCH", "must not be negative, got %d", c.RedisMaxBatch)
	}
	if err := checkDebugAddr(c.DebugAddr); err != nil {
		bad("DEBUG_ADDR", "%v", err)
	}
	if c.FailureMode != "open" && c.FailureMode != "closed" {
		bad("FAILURE_MODE", "must be open or closed, got %q", c.FailureMode)
	}
	return errors.Join(errs...)
}

// slogLevel parses LogLevel.
func (c Config) slogLevel() (slog.Level, error) {
	switch strings.ToLower(c.LogLevel) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown level %q (debug, info, warn, error)", c.LogLevel)
}
