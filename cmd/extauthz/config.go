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
	// IdempotencyMemoryMaxKeys bounds the keys the in-memory idempotency
	// store keeps (completed records evicted before live leases); 0 is unbounded.
	IdempotencyMemoryMaxKeys int `envconfig:"IDEMPOTENCY_MEMORY_MAX_KEYS" default:"1000000"`
	// GRPCMaxRecvBytes bounds one received gRPC message (17 MiB: a 16 MiB
	// buffered body plus headroom). Keep it above the largest body Envoy
	// buffers for ext_authz or ext_proc.
	GRPCMaxRecvBytes int `envconfig:"GRPC_MAX_RECV_BYTES" default:"17825792"`
	// GRPCMaxSendBytes bounds one sent gRPC message (17 MiB). Keep it above
	// the policy's largest max_body_bytes: an inline replay is one message.
	GRPCMaxSendBytes int `envconfig:"GRPC_MAX_SEND_BYTES" default:"17825792"`

	// Object storage for idempotent response bodies above max_body_bytes
	// (blob.go). Credentials come from the AWS SDK's standard chain:
	// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE
	// with AWS_ROLE_ARN (IRSA), shared files, or the instance role.

	// BlobS3Bucket enables S3-compatible storage of large bodies; empty disables it.
	BlobS3Bucket string `envconfig:"BLOB_S3_BUCKET" default:""`
	// BlobS3Endpoint is the server URL for S3-compatible servers (path-style); empty uses AWS.
	BlobS3Endpoint string `envconfig:"BLOB_S3_ENDPOINT" default:""`
	// BlobS3Prefix starts every object name.
	BlobS3Prefix string `envconfig:"BLOB_S3_PREFIX" default:"extauthz/idempotency/"`
	// BlobS3Region is the bucket's region; empty uses AWS_REGION, then us-east-1.
	BlobS3Region string `envconfig:"BLOB_S3_REGION" default:""`
	// BlobS3PartSize is the multipart part size, the memory bound per body being stored (at least 5 MiB).
	BlobS3PartSize int `envconfig:"BLOB_S3_PART_SIZE" default:"8388608"`
	// BlobS3LifecycleDays installs a bucket lifecycle rule expiring the prefix after that many days; 0 leaves the bucket's lifecycle alone.
	BlobS3LifecycleDays int `envconfig:"BLOB_S3_LIFECYCLE_DAYS" default:"1"`
	// ReplayAddr serves replays of bodies in object storage (replay.go); used only with a bucket.
	ReplayAddr string `envconfig:"REPLAY_ADDR" default:":9002"`
	// ReplaySecret signs replay tickets (at least 32 bytes), the same on every replica; empty draws a random one per process (one replica only).
	ReplaySecret string `envconfig:"REPLAY_SECRET" default:""`
}

// gRPC message limits: the smallest accepted (64 KiB carries any
// header-only message; less is a typo) and the default for 0.
const (
	minGRPCMessage     = 64 << 10
	defaultGRPCMessage = 17 << 20
)

// grpcMessageLimits returns the receive and send limits, 0 meaning default.
func (c Config) grpcMessageLimits() (recv, send int) {
	pick := func(n int) int {
		if n == 0 {
			return defaultGRPCMessage
		}
		return n
	}
	return pick(c.GRPCMaxRecvBytes), pick(c.GRPCMaxSendBytes)
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
	if c.IdempotencyMemoryMaxKeys < 0 {
		bad("IDEMPOTENCY_MEMORY_MAX_KEYS", "must not be negative, got %d", c.IdempotencyMemoryMaxKeys)
	}
	if c.GRPCMaxRecvBytes != 0 && c.GRPCMaxRecvBytes < minGRPCMessage {
		bad("GRPC_MAX_RECV_BYTES", "must be at least %d (0: the default), got %d", minGRPCMessage, c.GRPCMaxRecvBytes)
	}
	if c.GRPCMaxSendBytes != 0 && c.GRPCMaxSendBytes < minGRPCMessage {
		bad("GRPC_MAX_SEND_BYTES", "must be at least %d (0: the default), got %d", minGRPCMessage, c.GRPCMaxSendBytes)
	}
	if c.FailureMode != "open" && c.FailureMode != "closed" {
		bad("FAILURE_MODE", "must be open or closed, got %q", c.FailureMode)
	}
	c.validateBlob(bad)
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
