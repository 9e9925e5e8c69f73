package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/tracing"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Config is the service's configuration, read from EXTAUTHZ_* environment
// variables by envconfig (readEnv: each tag is a variable's whole name).
// Field comments state the defaults; docs/reference.md's table lists the
// same variables and must stay in step with this struct.
type Config struct {
	// GRPCAddr serves RLS, ext_authz, ext_proc, health and reflection.
	GRPCAddr string `envconfig:"EXTAUTHZ_GRPC_ADDR" default:":9001"`
	// HTTPAddr serves /metrics, /healthz, /readyz and /healthcheck.
	HTTPAddr string `envconfig:"EXTAUTHZ_HTTP_ADDR" default:":9090"`
	// MetricsAddr, set, also serves /metrics alone on this address (the
	// peer's PROMETHEUS_ADDR, which Envoy Gateway's scrape targets).
	MetricsAddr string `envconfig:"EXTAUTHZ_METRICS_ADDR" default:""`
	// Config is the policy file or directory; empty uses no policy. Unset
	// (and not set by the peer's RUNTIME_*), defaultPolicyDir where it
	// exists.
	Config string `envconfig:"EXTAUTHZ_CONFIG" default:""`
	// LogLevel is debug, info, warn or error.
	LogLevel string `envconfig:"EXTAUTHZ_LOG_LEVEL" default:"info"`
	// DrainDelay is how long SIGTERM keeps every API serving with health
	// NOT_SERVING before the server stops accepting; keep it well above
	// Envoy's health-check interval × unhealthy_threshold + timeout (5s in
	// envoy/): on a busy machine the checks run late.
	DrainDelay time.Duration `envconfig:"EXTAUTHZ_DRAIN_DELAY" default:"10s"`
	// ShutdownTimeout bounds the in-flight calls after the drain delay.
	ShutdownTimeout time.Duration `envconfig:"EXTAUTHZ_SHUTDOWN_TIMEOUT" default:"10s"`
	// RLSTenantKey is the descriptor entry key read as the tenant; empty disables.
	RLSTenantKey string `envconfig:"EXTAUTHZ_RLS_TENANT_KEY" default:"tenant"`
	// ShadowMode answers OK to every RLS request that would be denied (envoyproxy/ratelimit's SHADOW_MODE).
	ShadowMode bool `envconfig:"EXTAUTHZ_SHADOW_MODE" default:"false"`
	// QuotaMode puts every RLS descriptor in quota mode (envoyproxy/ratelimit's QUOTA_MODE).
	QuotaMode bool `envconfig:"EXTAUTHZ_QUOTA_MODE" default:"false"`
	// ResponseDynamicMetadata returns dynamic metadata in RLS responses (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA).
	ResponseDynamicMetadata bool `envconfig:"EXTAUTHZ_RESPONSE_DYNAMIC_METADATA" default:"false"`
	// RLSCharge is how RLS descriptors are charged (rls.Charging):
	// if_admitted, always or stop_when_over_limit; empty is always where
	// the peer's users configure us (limits over xDS; started as the peer,
	// its translation sets it), else if_admitted (rlscount.go).
	RLSCharge string `envconfig:"EXTAUTHZ_RLS_CHARGE" default:""`
	// RLSDefaultAlgorithm is the algorithm of a descriptor limit that
	// names none; empty is fixed_window where RLSCharge's empty is always,
	// else gcra.
	RLSDefaultAlgorithm string `envconfig:"EXTAUTHZ_RLS_DEFAULT_ALGORITHM" default:""`
	// MergeDomains lets several policy files define one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG).
	MergeDomains bool `envconfig:"EXTAUTHZ_MERGE_DOMAINS" default:"false"`
	// PolicySource is where limits come from: file (EXTAUTHZ_CONFIG) or
	// xds (RateLimitConfig resources over ADS); empty is xds when
	// EXTAUTHZ_XDS_SERVER_URL is set, else file (xds.go).
	PolicySource string `envconfig:"EXTAUTHZ_POLICY_SOURCE" default:""`
	// XDSServerURL is the xDS management server's host:port.
	XDSServerURL string `envconfig:"EXTAUTHZ_XDS_SERVER_URL" default:""`
	// XDSNodeID is the node id the server picks a snapshot by.
	XDSNodeID string `envconfig:"EXTAUTHZ_XDS_NODE_ID" default:"default"`
	// XDSNodeCluster is the node's cluster; empty, none.
	XDSNodeCluster string `envconfig:"EXTAUTHZ_XDS_NODE_CLUSTER" default:""`
	// XDSNodeMetadata is the node's metadata, key=value pairs comma separated.
	XDSNodeMetadata string `envconfig:"EXTAUTHZ_XDS_NODE_METADATA" default:""`
	// XDSServerUseTLS connects to the server over TLS.
	XDSServerUseTLS bool `envconfig:"EXTAUTHZ_XDS_SERVER_USE_TLS" default:"false"`
	// XDSServerTLSCA verifies the server (PEM bundle); empty, the system roots.
	XDSServerTLSCA string `envconfig:"EXTAUTHZ_XDS_SERVER_TLS_CA" default:""`
	// XDSServerTLSSAN is the name the server's certificate must carry;
	// empty, the host of EXTAUTHZ_XDS_SERVER_URL.
	XDSServerTLSSAN string `envconfig:"EXTAUTHZ_XDS_SERVER_TLS_SAN" default:""`
	// XDSClientTLSCert and XDSClientTLSKey, both set, are presented to the
	// server (mutual TLS).
	XDSClientTLSCert string `envconfig:"EXTAUTHZ_XDS_CLIENT_TLS_CERT" default:""`
	XDSClientTLSKey  string `envconfig:"EXTAUTHZ_XDS_CLIENT_TLS_KEY" default:""`
	// XDSHeaders are gRPC metadata sent on each xDS stream, as
	// key:value pairs comma separated.
	XDSHeaders headerPairs `envconfig:"EXTAUTHZ_XDS_HEADERS" default:""`
	// XDSMaxRecvBytes bounds one xDS response; 0 is gRPC's 4 MiB.
	XDSMaxRecvBytes int `envconfig:"EXTAUTHZ_XDS_MAX_RECV_BYTES" default:"0"`
	// XDSForceStart serves (an empty policy: nothing matches) before the
	// first update, as envoyproxy/ratelimit's
	// FORCE_START_WITHOUT_INITIAL_CONFIG; false, not ready until then.
	XDSForceStart bool `envconfig:"EXTAUTHZ_XDS_FORCE_START" default:"false"`
	// XDSBackoffMin and XDSBackoffMax bound the pause between reconnects.
	XDSBackoffMin time.Duration `envconfig:"EXTAUTHZ_XDS_BACKOFF_MIN" default:"500ms"`
	XDSBackoffMax time.Duration `envconfig:"EXTAUTHZ_XDS_BACKOFF_MAX" default:"30s"`
	// NearLimitRatio is the share of a limit past which admitted hits count
	// as near_limit, in (0, 1]; 0 is refused, not read as the default.
	NearLimitRatio float64 `envconfig:"EXTAUTHZ_NEAR_LIMIT_RATIO" default:"0.8"`
	// RuleMetricsMaxSeries bounds the distinct rule labels of extauthz_rule_hits_total; 0 turns it off.
	RuleMetricsMaxSeries int `envconfig:"EXTAUTHZ_RULE_METRICS_MAX_SERIES" default:"1000"`

	// RedisURL selects the Redis store (redis:// or rediss://); empty uses the embedded memory store.
	RedisURL string `envconfig:"EXTAUTHZ_REDIS_URL" default:""`
	// RedisCluster treats the URL's hosts as Redis Cluster seed nodes.
	RedisCluster bool `envconfig:"EXTAUTHZ_REDIS_CLUSTER" default:"false"`
	// RedisSentinelAddrs are Redis Sentinel host:port addresses, comma
	// separated; set, the sentinels name the master (EXTAUTHZ_REDIS_URL
	// then gives only scheme, credentials and DB, with no host).
	RedisSentinelAddrs string `envconfig:"EXTAUTHZ_REDIS_SENTINEL_ADDRS" default:""`
	// RedisSentinelMaster is the master's name in the sentinels' configuration.
	RedisSentinelMaster string `envconfig:"EXTAUTHZ_REDIS_SENTINEL_MASTER" default:""`
	// RedisSentinelPassword is the sentinels' own password (their requirepass).
	RedisSentinelPassword string `envconfig:"EXTAUTHZ_REDIS_SENTINEL_PASSWORD" default:""`
	// RedisPoolSize is the connection pool size per node; 0 is go-redis's default.
	RedisPoolSize int `envconfig:"EXTAUTHZ_REDIS_POOL_SIZE" default:"0"`
	// RedisMaxBatch > 1 coalesces concurrent decisions per Redis node into
	// pipelines of at most that many (redisstore.Options.MaxBatch); 1 (and 0)
	// sends each decision on its own (docs/benchmarks-redis.md).
	RedisMaxBatch int `envconfig:"EXTAUTHZ_REDIS_MAX_BATCH" default:"128"`
	// RedisDialTimeout bounds connecting to Redis.
	RedisDialTimeout time.Duration `envconfig:"EXTAUTHZ_REDIS_DIAL_TIMEOUT" default:"200ms"`
	// RedisReadTimeout bounds one Redis read.
	RedisReadTimeout time.Duration `envconfig:"EXTAUTHZ_REDIS_READ_TIMEOUT" default:"50ms"`
	// RedisWriteTimeout bounds one Redis write.
	RedisWriteTimeout time.Duration `envconfig:"EXTAUTHZ_REDIS_WRITE_TIMEOUT" default:"50ms"`
	// RedisCallTimeout bounds one rate-limit decision's wait for Redis,
	// counted from when it is asked (redisstore.Options.CallTimeout); past
	// it the failure mode answers. Keep it below Envoy's ratelimit filter
	// timeout so that the service, not Envoy, decides.
	RedisCallTimeout time.Duration `envconfig:"EXTAUTHZ_REDIS_CALL_TIMEOUT" default:"50ms"`
	// IdempotencyStoreTimeout bounds one Idempotency-Key store call; past it
	// the route's idempotency failure_mode answers. Keep it below Envoy's
	// ext_authz timeout and ext_proc message_timeout.
	IdempotencyStoreTimeout time.Duration `envconfig:"EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT" default:"100ms"`
	// RedisTLSInsecureSkipVerify skips server certificate checks (rediss:// only; testing).
	RedisTLSInsecureSkipVerify bool `envconfig:"EXTAUTHZ_REDIS_TLS_INSECURE_SKIP_VERIFY" default:"false"`
	// RedisTLSCAFile is a PEM bundle used to verify the Redis server (rediss://).
	RedisTLSCAFile string `envconfig:"EXTAUTHZ_REDIS_TLS_CA_FILE" default:""`
	// RedisTLSClientCert and RedisTLSClientKey, both set, are presented to
	// a Redis that requires a client certificate (rediss://), read again at
	// each new connection.
	RedisTLSClientCert string `envconfig:"EXTAUTHZ_REDIS_TLS_CLIENT_CERT" default:""`
	RedisTLSClientKey  string `envconfig:"EXTAUTHZ_REDIS_TLS_CLIENT_KEY" default:""`
	// FailureMode is open (fall back to the in-process store) or closed (deny) when Redis fails.
	FailureMode string `envconfig:"EXTAUTHZ_FAILURE_MODE" default:"open"`
	// FallbackReplicas is how many replicas' fail-open fallbacks share each
	// limit: each holds 1/N of it while Redis fails. 0 counts the live
	// replicas in Redis (the count last seen before the outage; 1 when
	// none was ever seen).
	FallbackReplicas int `envconfig:"EXTAUTHZ_FALLBACK_REPLICAS" default:"0"`
	// KeyPrefix starts every Redis key; no '{' or '}' (the hash tag's).
	KeyPrefix string `envconfig:"EXTAUTHZ_KEY_PREFIX" default:"xa"`
	// LocalCache answers keys known to be over limit without Redis until their reset.
	LocalCache bool `envconfig:"EXTAUTHZ_LOCAL_CACHE" default:"true"`
	// MemoryMaxKeys bounds the states the embedded memory store keeps (the
	// soonest-expiring are evicted beyond it); 0 is unbounded.
	MemoryMaxKeys int `envconfig:"EXTAUTHZ_MEMORY_MAX_KEYS" default:"1000000"`
	// AllotmentMaxSlices bounds the slices of consistency: allotment limits
	// a replica holds with Redis (idle ones are dropped first beyond it).
	AllotmentMaxSlices int `envconfig:"EXTAUTHZ_ALLOTMENT_MAX_SLICES" default:"100000"`
	// GlobalRedisURL, set, is the Redis designated global for limits with
	// scope: global: the allocator of regions' shares, reached in the
	// background only (docs/multi-region.md). Empty: global limits are
	// decided in this region's store alone, as regional ones.
	GlobalRedisURL string `envconfig:"EXTAUTHZ_GLOBAL_REDIS_URL" default:""`
	// GlobalRedisCluster treats GlobalRedisURL as a Redis Cluster seed.
	GlobalRedisCluster bool `envconfig:"EXTAUTHZ_GLOBAL_REDIS_CLUSTER" default:"false"`
	// Region names this replica's region, one of Regions.
	Region string `envconfig:"EXTAUTHZ_REGION" default:""`
	// Regions names every region sharing the global limits, the same list
	// everywhere: each keeps a floor reserved.
	// Comma-separated.
	Regions string `envconfig:"EXTAUTHZ_REGIONS" default:""`
	// RegionExchangeInterval is how often a region reports demand and
	// renews its shares.
	RegionExchangeInterval time.Duration `envconfig:"EXTAUTHZ_REGION_EXCHANGE_INTERVAL" default:"1s"`
	// RegionLease is how long before a window starts its share is granted
	// (at least the interval plus a WAN round trip; for RLQS budgets of
	// global limits, three RLQS ticks more).
	RegionLease time.Duration `envconfig:"EXTAUTHZ_REGION_LEASE" default:"5s"`
	// RegionSolo is the longest a key used in one region only goes between
	// exchanges (0: eight intervals); at most the interval turns it off.
	RegionSolo time.Duration `envconfig:"EXTAUTHZ_REGION_SOLO_INTERVAL" default:"0s"`
	// IdempotencyMemoryMaxKeys bounds the keys the in-memory idempotency
	// store keeps (completed records evicted before live leases); 0 is unbounded.
	IdempotencyMemoryMaxKeys int `envconfig:"EXTAUTHZ_IDEMPOTENCY_MEMORY_MAX_KEYS" default:"1000000"`
	// GRPCMaxRecvBytes bounds one received gRPC message (17 MiB: a 16 MiB
	// buffered body plus headroom). Keep it above the largest body Envoy
	// buffers for ext_authz or ext_proc.
	GRPCMaxRecvBytes int `envconfig:"EXTAUTHZ_GRPC_MAX_RECV_BYTES" default:"17825792"`
	// GRPCMaxSendBytes bounds one sent gRPC message (17 MiB). Keep it above
	// the policy's largest max_body_bytes: an inline replay is one message.
	GRPCMaxSendBytes int `envconfig:"EXTAUTHZ_GRPC_MAX_SEND_BYTES" default:"17825792"`
	// GRPCStreamWorkers is how many long-lived goroutines run gRPC calls
	// (grpc.NumStreamWorkers): their stacks stay grown, where a goroutine
	// per call grows and copies its stack every time (~7% of the server's
	// CPU at concurrency 64, docs/benchmarks-redis.md). Calls beyond them
	// still get their own goroutine; 0 gives every call one.
	GRPCStreamWorkers int `envconfig:"EXTAUTHZ_GRPC_STREAM_WORKERS" default:"64"`
	// RedisBreakerThreshold is how many Redis failures in a row open a
	// circuit breaker (one per Redis node, rate limits and idempotency each).
	RedisBreakerThreshold int `envconfig:"EXTAUTHZ_REDIS_BREAKER_THRESHOLD" default:"5"`
	// RedisBreakerPause is how long an open breaker skips its node before
	// one probe call.
	RedisBreakerPause time.Duration `envconfig:"EXTAUTHZ_REDIS_BREAKER_PAUSE" default:"1s"`
	// IdempotencyWaitReplicas makes completing an idempotency record wait
	// (Redis WAIT) until that many replicas have it; 0 does not wait.
	IdempotencyWaitReplicas int `envconfig:"EXTAUTHZ_IDEMPOTENCY_WAIT_REPLICAS" default:"0"`
	// IdempotencyWaitTimeout bounds that wait.
	IdempotencyWaitTimeout time.Duration `envconfig:"EXTAUTHZ_IDEMPOTENCY_WAIT_TIMEOUT" default:"20ms"`

	// Object storage for idempotent response bodies above max_body_bytes
	// (blob.go). Credentials come from the AWS SDK's standard chain:
	// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or AWS_WEB_IDENTITY_TOKEN_FILE
	// with AWS_ROLE_ARN (IRSA), shared files, or the instance role.

	// BlobS3Bucket enables S3-compatible storage of large bodies; empty disables it.
	BlobS3Bucket string `envconfig:"EXTAUTHZ_BLOB_S3_BUCKET" default:""`
	// BlobS3Endpoint is the server URL for S3-compatible servers (path-style); empty uses AWS.
	BlobS3Endpoint string `envconfig:"EXTAUTHZ_BLOB_S3_ENDPOINT" default:""`
	// BlobS3Prefix starts every object name.
	BlobS3Prefix string `envconfig:"EXTAUTHZ_BLOB_S3_PREFIX" default:"extauthz/idempotency/"`
	// BlobS3Region is the bucket's region; empty uses AWS_REGION, then us-east-1.
	BlobS3Region string `envconfig:"EXTAUTHZ_BLOB_S3_REGION" default:""`
	// BlobS3PartSize is the multipart part size, the memory bound per body being stored (at least 5 MiB).
	BlobS3PartSize int `envconfig:"EXTAUTHZ_BLOB_S3_PART_SIZE" default:"8388608"`
	// BlobS3LifecycleDays installs a bucket lifecycle rule expiring the prefix after that many days; 0 leaves the bucket's lifecycle alone.
	BlobS3LifecycleDays int `envconfig:"EXTAUTHZ_BLOB_S3_LIFECYCLE_DAYS" default:"1"`
	// ReplayAddr serves replays of bodies in object storage (replay.go); used only with a bucket.
	ReplayAddr string `envconfig:"EXTAUTHZ_REPLAY_ADDR" default:":9002"`
	// ReplaySecret signs replay tickets (at least 32 bytes), the same on every replica; empty draws a random one per process (one replica only).
	ReplaySecret string `envconfig:"EXTAUTHZ_REPLAY_SECRET" default:""`
	// DebugAddr serves Go's pprof profiles (/debug/pprof/); empty (the
	// default) serves none. Loopback addresses only: see debug.go.
	DebugAddr string `envconfig:"EXTAUTHZ_DEBUG_ADDR" default:""`
	// AdminAddr serves the admin API (admin.go); empty (the default) is off.
	// Loopback only unless a token is set.
	AdminAddr string `envconfig:"EXTAUTHZ_ADMIN_ADDR" default:""`
	// AdminToken is the admin API's bearer token (at least 16 bytes); empty requires none (loopback only).
	AdminToken string `envconfig:"EXTAUTHZ_ADMIN_TOKEN" default:""`
	// AdminTokenFile holds the token instead (a mounted Secret); surrounding whitespace is trimmed.
	AdminTokenFile string `envconfig:"EXTAUTHZ_ADMIN_TOKEN_FILE" default:""`
	// ChargeKeySecret is the HMAC key (at least 32 bytes) under which the
	// accounts of charged limits are hashed into their keys; required with
	// Redis when the policy keys a charged limit by an account, the same on
	// every replica; empty without Redis draws one per process.
	ChargeKeySecret string `envconfig:"EXTAUTHZ_CHARGE_KEY_SECRET" default:""`
	// ChargeKeySecretFile holds the secret instead (a mounted Secret); surrounding whitespace is trimmed.
	ChargeKeySecretFile string `envconfig:"EXTAUTHZ_CHARGE_KEY_SECRET_FILE" default:""`

	// Tracing (tracing.go). The OpenTelemetry SDK's own variables apply
	// beside these: OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_BSP_*
	// and the exporter's OTEL_EXPORTER_OTLP_HEADERS, _CERTIFICATE, _TIMEOUT.

	// OTLPEndpoint turns tracing on: the OTLP collector's base URL,
	// http:// (plaintext) or https:// (TLS) with a port; empty, the
	// default, traces nothing and builds no exporter.
	OTLPEndpoint string `envconfig:"EXTAUTHZ_OTLP_ENDPOINT" default:""`
	// OTLPProtocol is grpc or http/protobuf (which posts to the endpoint's
	// path + /v1/traces).
	OTLPProtocol string `envconfig:"EXTAUTHZ_OTLP_PROTOCOL" default:"grpc"`
	// TraceSampleRatio is the share of traces started here that are
	// sampled; a trace context from Envoy is followed, sampled or not.
	// 1 because in a traced mesh the sampling decision is Envoy's (or the
	// client's), and every call then arrives with one.
	TraceSampleRatio float64 `envconfig:"EXTAUTHZ_TRACE_SAMPLE_RATIO" default:"1"`

	// GRPCTLSCert and GRPCTLSKey, both set, make the gRPC port TLS-only
	// (PEM files, reloaded when they change; listen.go).
	GRPCTLSCert string `envconfig:"EXTAUTHZ_GRPC_TLS_CERT" default:""`
	GRPCTLSKey  string `envconfig:"EXTAUTHZ_GRPC_TLS_KEY" default:""`
	// GRPCTLSClientCA, set, makes it mutual TLS: clients must present a
	// certificate signed by a CA of this PEM bundle.
	GRPCTLSClientCA string `envconfig:"EXTAUTHZ_GRPC_TLS_CLIENT_CA" default:""`
	// GRPCTLSClientSANs, comma separated, admits only client certificates
	// naming one of them (DNS, URI such as a SPIFFE ID, IP or email).
	GRPCTLSClientSANs string `envconfig:"EXTAUTHZ_GRPC_TLS_CLIENT_SANS" default:""`
	// GRPCTLSReload is how often the TLS files are checked for changes.
	GRPCTLSReload time.Duration `envconfig:"EXTAUTHZ_GRPC_TLS_RELOAD" default:"10s"`
	// GRPCUDS, set, also serves the gRPC APIs on this Unix socket, in
	// plaintext (for an Envoy beside the service); empty, none.
	GRPCUDS string `envconfig:"EXTAUTHZ_GRPC_UDS" default:""`
}

// gRPC message limits: the smallest accepted (64 KiB carries any
// header-only message; less is a typo) and the default for 0.
const (
	minGRPCMessage     = 64 << 10
	defaultGRPCMessage = 17 << 20
	maxGRPCMessage     = 1 << 30
)

func validGRPCMessage(n int) bool { return n == 0 || (n >= minGRPCMessage && n <= maxGRPCMessage) }

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

// loadConfig reads the EXTAUTHZ_* environment, and envoyproxy/ratelimit's
// names where they apply (peerenv.go), and validates it. Every problem is
// one line naming the variable and what it accepts; warnings are the
// peer's variables that have no meaning here, one line each.
func loadConfig() (Config, []string, error) {
	return loadConfigFrom(os.Args[0])
}

func loadConfigFrom(argv0 string) (Config, []string, error) {
	var cfg Config
	peer, err := exportPeerEnv(argv0)
	if err != nil {
		return cfg, peer.warnings, err
	}
	// envconfig stops at the first value it cannot parse and words it in
	// Go types; check them all first, in our words, with the Go runtime's.
	if err := errors.Join(parseErrors(os.LookupEnv), goRuntimeEnvErrors(os.LookupEnv)); err != nil {
		return cfg, peer.warnings, peer.annotate(err)
	}
	if err := readEnv(&cfg); err != nil {
		return cfg, peer.warnings, fmt.Errorf("configuration: %w", peer.annotate(err))
	}
	cfg.Config = cfg.policyPath(os.LookupEnv, dirExists)
	return cfg, peer.warnings, peer.annotate(cfg.Validate())
}

// defaultPolicyDir is where the image ships its example policy. The image
// sets no EXTAUTHZ_CONFIG for it: an image's ENV counts as set, and ours
// win over the peer's, so it would shadow the peer's RUNTIME_ROOT policy
// directory of an operator who swapped the image (and only the image).
const defaultPolicyDir = "/etc/extauthz/policy"

// policyPath is the policy file or directory to read: EXTAUTHZ_CONFIG as
// given (by us or by the peer's RUNTIME_* variables; set to empty, none),
// else defaultPolicyDir where it exists, for policies read from files.
func (c Config) policyPath(lookup func(string) (string, bool), exists func(string) bool) string {
	if _, set := lookup("EXTAUTHZ_CONFIG"); set || c.policySourceKind() != sourceFile || !exists(defaultPolicyDir) {
		return c.Config
	}
	return defaultPolicyDir
}

// printConfigErrors prints loadConfig's problems, one line each naming
// its variable (the caller exits 2, as for any other usage error).
func printConfigErrors(stderr io.Writer, err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "extauthz: %s\n", line)
	}
}

// rule is what one variable accepts, and whether its value does.
type rule struct {
	name string // without the EXTAUTHZ_ prefix
	want string // the accepted values, as the error states them
	got  any    // the value, quoted in the error
	ok   bool
}

// rules lists every variable with a constraint. Variables not listed take
// any value of their type (strings, bools).
func (c Config) rules() []rule {
	return append([]rule{
		{"GRPC_ADDR", "host:port with a port 0-65535, e.g. :9001", c.GRPCAddr, validAddr(c.GRPCAddr)},
		{"HTTP_ADDR", "host:port with a port 0-65535, e.g. :9090", c.HTTPAddr, validAddr(c.HTTPAddr)},
		{"METRICS_ADDR", "empty (off), or host:port with a port 0-65535, e.g. :19001", c.MetricsAddr, c.MetricsAddr == "" || validAddr(c.MetricsAddr)},
		{"LOG_LEVEL", "debug, info, warn or error", c.LogLevel, validLevel(c.LogLevel)},
		{"DEBUG_ADDR", "empty (off) or a loopback host:port, e.g. 127.0.0.1:6060", c.DebugAddr, checkDebugAddr(c.DebugAddr) == nil},
		{"ADMIN_ADDR", "empty (off), a loopback host:port (e.g. 127.0.0.1:9003), or any host:port with EXTAUTHZ_ADMIN_TOKEN or EXTAUTHZ_ADMIN_TOKEN_FILE set", c.AdminAddr, c.validAdminAddr()},
		{"ADMIN_TOKEN", fmt.Sprintf("empty, or at least %d bytes, and not with EXTAUTHZ_ADMIN_TOKEN_FILE", minAdminToken), redactSecret(c.AdminToken),
			c.AdminToken == "" || (len(c.AdminToken) >= minAdminToken && c.AdminTokenFile == "")},
		{"ADMIN_TOKEN_FILE", fmt.Sprintf("empty, or a readable file holding a token of at least %d bytes", minAdminToken), c.AdminTokenFile, c.validAdminTokenFile()},
		{"CHARGE_KEY_SECRET", fmt.Sprintf("empty, or at least %d bytes, and not with EXTAUTHZ_CHARGE_KEY_SECRET_FILE", minChargeKeySecret), redactSecret(c.ChargeKeySecret),
			c.ChargeKeySecret == "" || (len(c.ChargeKeySecret) >= minChargeKeySecret && c.ChargeKeySecretFile == "")},
		{"CHARGE_KEY_SECRET_FILE", fmt.Sprintf("empty, or a readable file holding a secret of at least %d bytes", minChargeKeySecret), c.ChargeKeySecretFile, c.validChargeKeySecretFile()},
		{"DRAIN_DELAY", "a duration of 0 (stop accepting at once) or more, e.g. 10s", c.DrainDelay, c.DrainDelay >= 0},
		{"SHUTDOWN_TIMEOUT", "a duration above 0, e.g. 10s", c.ShutdownTimeout, c.ShutdownTimeout > 0},
		{"RLS_CHARGE", "empty, if_admitted, always or stop_when_over_limit", c.RLSCharge, c.validRLSCharge()},
		{"RLS_DEFAULT_ALGORITHM", "empty, gcra, sliding_log, sliding_window or fixed_window", c.RLSDefaultAlgorithm,
			c.RLSDefaultAlgorithm == "" || ratelimit.Algorithm(c.RLSDefaultAlgorithm).Valid()},
		{"REDIS_URL", c.redisURLWant(), redactURL(c.RedisURL), c.validRedisURL()},
		{"REDIS_SENTINEL_ADDRS", "empty, or comma-separated host:port addresses of Redis Sentinels, with EXTAUTHZ_REDIS_URL set and EXTAUTHZ_REDIS_CLUSTER false",
			c.RedisSentinelAddrs, c.validSentinelAddrs()},
		{"REDIS_SENTINEL_MASTER", "the master's name in Sentinel (e.g. mymaster) when EXTAUTHZ_REDIS_SENTINEL_ADDRS is set, else empty",
			c.RedisSentinelMaster, (c.RedisSentinelMaster != "") == c.sentinel()},
		{"REDIS_SENTINEL_PASSWORD", "empty unless EXTAUTHZ_REDIS_SENTINEL_ADDRS is set", redactSecret(c.RedisSentinelPassword),
			c.RedisSentinelPassword == "" || c.sentinel()},
		{"REDIS_POOL_SIZE", "0 (go-redis's default, 10 per CPU) to 10000", c.RedisPoolSize, c.RedisPoolSize >= 0 && c.RedisPoolSize <= 10000},
		{"REDIS_DIAL_TIMEOUT", "a duration above 0, e.g. 200ms", c.RedisDialTimeout, c.RedisDialTimeout > 0},
		{"REDIS_READ_TIMEOUT", "a duration above 0, e.g. 50ms", c.RedisReadTimeout, c.RedisReadTimeout > 0},
		{"REDIS_WRITE_TIMEOUT", "a duration above 0, e.g. 50ms", c.RedisWriteTimeout, c.RedisWriteTimeout > 0},
		{"REDIS_CALL_TIMEOUT", "a duration above 0, e.g. 50ms", c.RedisCallTimeout, c.RedisCallTimeout > 0},
		{"IDEMPOTENCY_STORE_TIMEOUT", "a duration above 0, e.g. 100ms", c.IdempotencyStoreTimeout, c.IdempotencyStoreTimeout > 0},
		{"REDIS_TLS_CA_FILE", "empty, or a readable file when EXTAUTHZ_REDIS_URL is rediss://", c.RedisTLSCAFile, c.validCAFile()},
		{"REDIS_TLS_CLIENT_CERT", "empty, or a readable PEM file, with EXTAUTHZ_REDIS_TLS_CLIENT_KEY, when EXTAUTHZ_REDIS_URL is rediss://",
			c.RedisTLSClientCert, c.validRedisClientCert(c.RedisTLSClientCert, c.RedisTLSClientKey)},
		{"REDIS_TLS_CLIENT_KEY", "empty, or a readable PEM file, with EXTAUTHZ_REDIS_TLS_CLIENT_CERT, when EXTAUTHZ_REDIS_URL is rediss://",
			c.RedisTLSClientKey, c.validRedisClientCert(c.RedisTLSClientKey, c.RedisTLSClientCert)},
		{"REDIS_TLS_INSECURE_SKIP_VERIFY", "false unless EXTAUTHZ_REDIS_URL is rediss://", c.RedisTLSInsecureSkipVerify, !c.RedisTLSInsecureSkipVerify || c.tls()},
		{"FAILURE_MODE", "open or closed", c.FailureMode, c.FailureMode == "open" || c.FailureMode == "closed"},
		{"FALLBACK_REPLICAS", "0 (count the live replicas in Redis) to 10000", c.FallbackReplicas, c.FallbackReplicas >= 0 && c.FallbackReplicas <= 10000},
		// Both Redis stores refuse braces (they would break the hash tag);
		// checked here so that the mistake stops the process at once.
		{"KEY_PREFIX", "text without '{' or '}', e.g. xa", c.KeyPrefix, !strings.ContainsAny(c.KeyPrefix, "{}")},
		{"MEMORY_MAX_KEYS", "0 (unbounded) or more", c.MemoryMaxKeys, c.MemoryMaxKeys >= 0},
		{"ALLOTMENT_MAX_SLICES", "1 or more", c.AllotmentMaxSlices, c.AllotmentMaxSlices >= 1},
		{"REDIS_MAX_BATCH", "0 or 1 (no coalescing) to 4096", c.RedisMaxBatch, c.RedisMaxBatch >= 0 && c.RedisMaxBatch <= 4096},
		{"IDEMPOTENCY_MEMORY_MAX_KEYS", "0 (unbounded) or more", c.IdempotencyMemoryMaxKeys, c.IdempotencyMemoryMaxKeys >= 0},
		{"GRPC_MAX_RECV_BYTES", fmt.Sprintf("0 (the default, %d) or %d to %d", defaultGRPCMessage, minGRPCMessage, maxGRPCMessage), c.GRPCMaxRecvBytes, validGRPCMessage(c.GRPCMaxRecvBytes)},
		{"GRPC_MAX_SEND_BYTES", fmt.Sprintf("0 (the default, %d) or %d to %d", defaultGRPCMessage, minGRPCMessage, maxGRPCMessage), c.GRPCMaxSendBytes, validGRPCMessage(c.GRPCMaxSendBytes)},
		{"GRPC_STREAM_WORKERS", "0 (a goroutine per call) to 4096", c.GRPCStreamWorkers, c.GRPCStreamWorkers >= 0 && c.GRPCStreamWorkers <= 4096},
		{"NEAR_LIMIT_RATIO", "a ratio in (0, 1], e.g. 0.8", c.NearLimitRatio, c.NearLimitRatio > 0 && c.NearLimitRatio <= 1},
		{"RULE_METRICS_MAX_SERIES", "0 (per-rule metrics off) or more", c.RuleMetricsMaxSeries, c.RuleMetricsMaxSeries >= 0},
		{"REDIS_BREAKER_THRESHOLD", "1 to 1000 failures in a row", c.RedisBreakerThreshold, c.RedisBreakerThreshold >= 1 && c.RedisBreakerThreshold <= 1000},
		{"REDIS_BREAKER_PAUSE", "a duration above 0, e.g. 1s", c.RedisBreakerPause, c.RedisBreakerPause > 0},
		{"IDEMPOTENCY_WAIT_REPLICAS", "0 (no WAIT) to 16", c.IdempotencyWaitReplicas, c.IdempotencyWaitReplicas >= 0 && c.IdempotencyWaitReplicas <= 16},
		{"IDEMPOTENCY_WAIT_TIMEOUT", "a duration of 1ms or more, below EXTAUTHZ_REDIS_READ_TIMEOUT when WAIT is on, e.g. 20ms", c.IdempotencyWaitTimeout,
			c.IdempotencyWaitTimeout >= time.Millisecond && (c.IdempotencyWaitReplicas == 0 || c.IdempotencyWaitTimeout < c.RedisReadTimeout)},
		{"OTLP_ENDPOINT", "empty (tracing off), or http://host:port or https://host:port (a path only with http/protobuf)", redactURL(c.OTLPEndpoint), c.validOTLPEndpoint()},
		{"OTLP_PROTOCOL", "grpc or http/protobuf", c.OTLPProtocol, c.OTLPProtocol == tracing.ProtocolGRPC || c.OTLPProtocol == tracing.ProtocolHTTP},
		{"TRACE_SAMPLE_RATIO", "a ratio in [0, 1]", c.TraceSampleRatio, c.TraceSampleRatio >= 0 && c.TraceSampleRatio <= 1},
	}, slices.Concat(c.listenRules(), c.xdsRules(), c.regionRules())...)
}

// regionRules constrains the settings of global limits (docs/multi-region.md).
func (c Config) regionRules() []rule {
	return []rule{
		{"GLOBAL_REDIS_URL", "empty, or a redis:// or rediss:// URL with EXTAUTHZ_REDIS_URL set", redactURL(c.GlobalRedisURL),
			c.GlobalRedisURL == "" || c.RedisURL != "" && (strings.HasPrefix(c.GlobalRedisURL, "redis://") || strings.HasPrefix(c.GlobalRedisURL, "rediss://"))},
		{"REGION", "with EXTAUTHZ_GLOBAL_REDIS_URL, one of EXTAUTHZ_REGIONS (distinct names without commas or spaces)", c.Region, c.GlobalRedisURL == "" || c.topology().Validate() == nil},
		{"REGION_EXCHANGE_INTERVAL", "a duration above 0, e.g. 1s", c.RegionExchangeInterval, c.RegionExchangeInterval > 0},
		{"REGION_LEASE", "a duration at least EXTAUTHZ_REGION_EXCHANGE_INTERVAL, e.g. 5s", c.RegionLease, c.RegionLease >= c.RegionExchangeInterval},
		{"REGION_SOLO_INTERVAL", "a duration of 0 or more (0: eight exchange intervals), e.g. 8s", c.RegionSolo, c.RegionSolo >= 0},
	}
}

// Validate returns every problem of c, one line each, naming the variable,
// its value and what it accepts.
func (c Config) Validate() error {
	var errs []error
	for _, r := range append(c.rules(), c.blobRules()...) {
		if !r.ok {
			errs = append(errs, fmt.Errorf("EXTAUTHZ_%s=%s: want %s", r.name, quote(r.got), r.want))
		}
	}
	return errors.Join(errs...)
}

// metricsOptions are the per-rule metrics' settings.
func (c Config) metricsOptions() envoy.MetricsOptions {
	o := envoy.MetricsOptions{NearLimitRatio: c.NearLimitRatio, MaxRuleSeries: c.RuleMetricsMaxSeries}
	if o.MaxRuleSeries == 0 {
		o.MaxRuleSeries = -1 // off
	}
	return o
}

// idempotencyMetricsOptions cap the per-route idempotency metric with the
// per-rule metrics' setting: one knob for "how many configured names may
// become label values" (each metric counts its own names against it).
func (c Config) idempotencyMetricsOptions() authz.IdempotencyMetricsOptions {
	return authz.IdempotencyMetricsOptions{MaxRouteSeries: c.metricsOptions().MaxRuleSeries}
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

func validLevel(s string) bool {
	_, err := Config{LogLevel: s}.slogLevel()
	return err == nil
}
