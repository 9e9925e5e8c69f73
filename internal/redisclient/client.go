// Package redisclient builds the one go-redis client that both Redis stores
// (rate limits and idempotency) share, standalone, cluster or a master found
// through Redis Sentinel, from a URL and a few options: TLS, pool size,
// timeouts, and the retry and pool settings that suit commands which must
// never be sent twice.
package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/certsource"
)

// DefaultPrefix starts every key of both stores when their Prefix option is
// empty.
const DefaultPrefix = "xa"

// KeyPrefix returns the prefix a store's keys start with: p, or
// DefaultPrefix when p is empty. A brace in p is refused: every store keeps
// one state under one {…} hash tag, and a brace in the prefix would move
// the tag (and the key's slot) away from it.
func KeyPrefix(p string) (string, error) {
	if strings.ContainsAny(p, "{}") {
		return "", fmt.Errorf("prefix %q must not contain '{' or '}'", p)
	}
	if p == "" {
		return DefaultPrefix, nil
	}
	return p, nil
}

// ErrConfig means Options are unusable; the message names the field.
var ErrConfig = errors.New("redis client config")

// Options describe how to reach Redis. Zero durations take the defaults.
type Options struct {
	// URL is redis://[user:password@]host:port[/db] or rediss:// for TLS.
	// For a cluster it names a seed node; more seeds go in addr= parameters.
	URL string
	// Cluster treats URL as Redis Cluster seed nodes.
	Cluster bool
	// SentinelAddrs, when set, are Redis Sentinel host:port addresses that
	// name the master: URL then gives only the scheme (TLS for the master
	// and the sentinels alike), the master's user, password and DB, and
	// must have no host (redis://[user:password@]/[db]). Not with Cluster.
	SentinelAddrs []string
	// SentinelMaster is the master's name in the sentinels' configuration;
	// required with SentinelAddrs.
	SentinelMaster string
	// SentinelPassword is the sentinels' own requirepass, if any.
	SentinelPassword string
	// PoolSize is the number of connections per node; 0 is go-redis's
	// default (10 per CPU).
	PoolSize int
	// DialTimeout bounds connecting; default 200ms.
	DialTimeout time.Duration
	// ReadTimeout bounds one read, i.e. one operation's wait; default 50ms.
	ReadTimeout time.Duration
	// WriteTimeout bounds one write; default 50ms.
	WriteTimeout time.Duration
	// TLSCAFile is a PEM bundle that verifies the server (rediss:// only).
	TLSCAFile string
	// TLSInsecureSkipVerify disables certificate checks (rediss:// only; for tests).
	TLSInsecureSkipVerify bool
	// TLSClientCertFile and TLSClientKeyFile, both set, are the PEM
	// certificate and key presented to a Redis that requires one
	// (tls-auth-clients; rediss:// only). They are read at each dial, so
	// new connections present a rotated pair.
	TLSClientCertFile, TLSClientKeyFile string
}

// Defaults for Options.
const (
	DefaultDialTimeout  = 200 * time.Millisecond
	DefaultReadTimeout  = 50 * time.Millisecond
	DefaultWriteTimeout = 50 * time.Millisecond
)

// New builds a *redis.Client or, with Cluster, a *redis.ClusterClient from
// o. It does not connect: go-redis dials lazily and reconnects by itself, so
// a Redis that is down at start-up is not an error here.
//
// Retries are off: a script whose reply was lost may already have charged
// its hits, and re-sending it would charge them twice (the stores' commands
// also opt out one by one, see package redisscript). Dialing is tried once
// instead of go-redis's five attempts 100 ms apart, which would hold every
// call for half a second while Redis is down. A failed call is the caller's
// to handle (see package failover).
//
// Pipelines (the rate-limit store's coalesced decisions) run on the main
// pool, not on go-redis's separate pipeline pool: that pool never pre-dials,
// so the first pipeline of every process would dial a new connection in the
// middle of a burst, and coalescing keeps at most one round trip per node in
// flight, so a second pool buys nothing.
func New(o Options) (redis.UniversalClient, error) {
	tlsConf, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	if len(o.SentinelAddrs) > 0 || o.SentinelMaster != "" {
		return o.newFailover(tlsConf)
	}
	if o.Cluster {
		opts, err := redis.ParseClusterURL(o.URL)
		if err != nil {
			return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
		}
		o.tune(tunables{&opts.PoolSize, &opts.PipelinePoolSize, &opts.MaxRetries, &opts.DialerRetries,
			&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled, &opts.TLSConfig}, tlsConf)
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
	}
	o.tune(tunables{&opts.PoolSize, &opts.PipelinePoolSize, &opts.MaxRetries, &opts.DialerRetries,
		&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled, &opts.TLSConfig}, tlsConf)
	return redis.NewClient(opts), nil
}

// newFailover builds the Sentinel-backed client: a *redis.Client whose
// dialer asks the sentinels for the master's address, and which drops its
// connections to the old master when a sentinel announces +switch-master,
// or, should that message be missed, when the watchdog (sentinelwatch.go)
// sees another master named.
// To the stores it is a standalone server.
func (o Options) newFailover(tlsConf *tls.Config) (redis.UniversalClient, error) {
	if err := o.checkSentinel(); err != nil {
		return nil, err
	}
	u, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: URL: %w", ErrConfig, err)
	}
	opts := &redis.FailoverOptions{
		MasterName: o.SentinelMaster, SentinelAddrs: o.SentinelAddrs, SentinelPassword: o.SentinelPassword,
		Username: u.Username, Password: u.Password, DB: u.DB, Protocol: u.Protocol, ClientName: u.ClientName,
		TLSConfig: u.TLSConfig,
	}
	if opts.TLSConfig != nil {
		// ParseURL named "localhost" for the missing host; each connection
		// verifies the address it dials instead (the master's, or a
		// sentinel's), as crypto/tls does when ServerName is empty.
		opts.TLSConfig.ServerName = ""
	}
	o.tune(tunables{&opts.PoolSize, &opts.PipelinePoolSize, &opts.MaxRetries, &opts.DialerRetries,
		&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled, &opts.TLSConfig}, tlsConf)
	conns := newMasterConns(opts.DialTimeout, opts.TLSConfig)
	opts.Dialer = conns.Dialer
	c := redis.NewFailoverClient(opts)
	// Added before the first dial (the pools dial lazily), so that every
	// master connection is tracked.
	c.AddHook(conns)
	go watchSentinels(c, opts, conns) // ends when c is closed
	return c, nil
}

// checkSentinel reports Sentinel options that do not fit together.
func (o Options) checkSentinel() error {
	switch {
	case o.Cluster:
		return fmt.Errorf("%w: Sentinel and Cluster are exclusive", ErrConfig)
	case len(o.SentinelAddrs) == 0 || o.SentinelMaster == "":
		return fmt.Errorf("%w: Sentinel needs both its addresses and the master name", ErrConfig)
	}
	for _, a := range o.SentinelAddrs {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return fmt.Errorf("%w: Sentinel address %q is not host:port", ErrConfig, a)
		}
	}
	u, err := url.Parse(o.URL)
	if err != nil || u.Host != "" {
		return fmt.Errorf("%w: with Sentinel the URL names no host (the sentinels name the master): redis://[user:password@]/[db]", ErrConfig)
	}
	return nil
}

// tunables points at the fields that redis.Options and redis.ClusterOptions
// both have, so that one function decides them for both kinds of client.
type tunables struct {
	poolSize, pipelinePoolSize, maxRetries, dialerRetries *int
	dialTimeout, readTimeout, writeTimeout                *time.Duration
	contextTimeoutEnabled                                 *bool
	tls                                                   **tls.Config
}

// tune sets t from o as New describes; tlsConf is o.tlsConfig().
func (o Options) tune(t tunables, tlsConf *tls.Config) {
	*t.poolSize, *t.pipelinePoolSize = o.PoolSize, -1
	*t.maxRetries, *t.dialerRetries = -1, 1
	*t.dialTimeout, *t.readTimeout, *t.writeTimeout = o.timeouts()
	*t.contextTimeoutEnabled = true
	*t.tls = mergeTLS(*t.tls, tlsConf)
}

func (o Options) timeouts() (dial, read, write time.Duration) {
	pick := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	return pick(o.DialTimeout, DefaultDialTimeout), pick(o.ReadTimeout, DefaultReadTimeout), pick(o.WriteTimeout, DefaultWriteTimeout)
}

// tlsConfig returns the TLS settings beyond what the URL implies, or nil.
// TLS options with a plain redis:// URL are a mistake worth reporting.
func (o Options) tlsConfig() (*tls.Config, error) {
	clientCert := o.TLSClientCertFile != "" || o.TLSClientKeyFile != ""
	if o.TLSCAFile == "" && !o.TLSInsecureSkipVerify && !clientCert {
		return nil, nil
	}
	if !strings.HasPrefix(o.URL, "rediss://") {
		return nil, fmt.Errorf("%w: TLS CA file, client certificate or insecure-skip-verify set but the URL is not rediss://", ErrConfig)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.TLSInsecureSkipVerify} //nolint:gosec // opt-in, documented for tests
	if clientCert {
		if o.TLSClientCertFile == "" || o.TLSClientKeyFile == "" {
			return nil, fmt.Errorf("%w: a TLS client certificate needs both its certificate and its key file", ErrConfig)
		}
		cc, err := certsource.NewClientCert(o.TLSClientCertFile, o.TLSClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		c.GetClientCertificate = cc.Get
	}
	if o.TLSCAFile != "" {
		pem, err := os.ReadFile(o.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: TLS CA file: %w", ErrConfig, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: TLS CA file %s: no PEM certificates", ErrConfig, o.TLSCAFile)
		}
	}
	return c, nil
}

// mergeTLS keeps the server name go-redis derived from the URL.
func mergeTLS(fromURL, extra *tls.Config) *tls.Config {
	if extra == nil {
		if fromURL != nil && fromURL.MinVersion == 0 {
			fromURL.MinVersion = tls.VersionTLS12
		}
		return fromURL
	}
	if fromURL != nil {
		extra.ServerName = fromURL.ServerName
	}
	return extra
}
