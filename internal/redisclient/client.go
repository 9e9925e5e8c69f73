// Package redisclient builds the one go-redis client that both Redis stores
// (rate limits and idempotency) share, standalone or cluster, from a URL and
// a few options: TLS, pool size, timeouts, and the retry and pool settings
// that suit commands which must never be sent twice.
package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key of both stores when their Prefix option is
// empty.
const DefaultPrefix = "xa"

// ErrConfig means Options are unusable; the message names the field.
var ErrConfig = errors.New("redis client config")

// Options describe how to reach Redis. Zero durations take the defaults.
type Options struct {
	// URL is redis://[user:password@]host:port[/db] or rediss:// for TLS.
	// For a cluster it names a seed node; more seeds go in addr= parameters.
	URL string
	// Cluster treats URL as Redis Cluster seed nodes.
	Cluster bool
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
	if o.TLSCAFile == "" && !o.TLSInsecureSkipVerify {
		return nil, nil
	}
	if !strings.HasPrefix(o.URL, "rediss://") {
		return nil, fmt.Errorf("%w: TLS CA file or insecure-skip-verify set but the URL is not rediss://", ErrConfig)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.TLSInsecureSkipVerify} //nolint:gosec // opt-in, documented for tests
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
