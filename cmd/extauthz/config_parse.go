package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/tracing"
)

// parseErrors checks that every EXTAUTHZ_* variable that is set parses as
// its field's type, and returns one line per one that does not.
func parseErrors(lookup func(string) (string, bool)) error {
	want := map[string]string{}
	for _, r := range (Config{}).rules() {
		want[r.name] = r.want
	}
	var errs []error
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := strings.TrimPrefix(varName(f), envPrefix)
		v, ok := lookup(envPrefix + name)
		if !ok {
			continue
		}
		kind, err := parseAs(f.Type, v)
		if err == nil {
			continue
		}
		w := want[name]
		if w == "" {
			w = kind
		}
		errs = append(errs, fmt.Errorf("EXTAUTHZ_%s=%q: not %s; want %s", name, v, kind, w))
	}
	return errors.Join(errs...)
}

// parseAs parses v as envconfig would for t, and names the kind of value t
// takes.
func parseAs(t reflect.Type, v string) (kind string, err error) {
	switch {
	case t == reflect.TypeFor[time.Duration]():
		_, err = time.ParseDuration(v)
		return "a duration (e.g. 250ms, 10s)", err
	case t.Kind() == reflect.Int:
		return "an integer", decimalInt(v, t.Bits())
	case t.Kind() == reflect.Bool:
		_, err = strconv.ParseBool(v)
		return "true or false", err
	case t.Kind() == reflect.Float64:
		_, err = strconv.ParseFloat(v, 64)
		return "a number", err
	case t == reflect.TypeFor[headerPairs]():
		_, err = parsePairs(v)
		return "key:value pairs, comma separated", err
	}
	return "a string", nil
}

// decimalInt accepts the integers envconfig reads as their decimal value.
// envconfig parses with base 0, so 010 would be 8 and 0x10 16: such values
// are refused here rather than read in a base nobody meant.
func decimalInt(v string, bits int) error {
	n, err := strconv.ParseInt(v, 10, bits)
	if err != nil {
		return err
	}
	if m, err := strconv.ParseInt(v, 0, bits); err != nil || m != n {
		return fmt.Errorf("%q is not a plain decimal", v)
	}
	return nil
}

// validAddr accepts what net.Listen("tcp", addr) takes with a numeric port.
func validAddr(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// tls reports a rediss:// URL.
func (c Config) tls() bool {
	u, err := url.Parse(c.RedisURL)
	return err == nil && u.Scheme == "rediss"
}

// sentinel reports Redis through Sentinel: EXTAUTHZ_REDIS_SENTINEL_ADDRS set.
func (c Config) sentinel() bool { return c.RedisSentinelAddrs != "" }

// sentinelAddrs splits EXTAUTHZ_REDIS_SENTINEL_ADDRS.
func (c Config) sentinelAddrs() []string {
	if !c.sentinel() {
		return nil
	}
	addrs := strings.Split(c.RedisSentinelAddrs, ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	return addrs
}

func (c Config) validSentinelAddrs() bool {
	if !c.sentinel() {
		return true
	}
	for _, a := range c.sentinelAddrs() {
		h, p, err := net.SplitHostPort(a)
		if n, perr := strconv.Atoi(p); err != nil || h == "" || perr != nil || n < 1 || n > 65535 {
			return false
		}
	}
	return c.RedisURL != "" && !c.RedisCluster
}

// redisURLWant is what EXTAUTHZ_REDIS_URL accepts: with Sentinel, no host.
func (c Config) redisURLWant() string {
	if c.sentinel() {
		return "redis://[user:password@]/[db] or rediss://... with no host: with EXTAUTHZ_REDIS_SENTINEL_ADDRS the sentinels name the master"
	}
	return "empty, or redis://[user:password@]host:port[/db] or rediss://..."
}

func (c Config) validRedisURL() bool {
	if c.RedisURL == "" {
		return true
	}
	if c.sentinel() {
		u, err := url.Parse(c.RedisURL)
		if err != nil || u.Host != "" {
			return false
		}
	}
	var err error
	if c.RedisCluster {
		_, err = redis.ParseClusterURL(c.RedisURL)
	} else {
		_, err = redis.ParseURL(c.RedisURL)
	}
	return err == nil
}

func (c Config) validCAFile() bool {
	if c.RedisTLSCAFile == "" {
		return true
	}
	if !c.tls() {
		return false
	}
	f, err := os.Open(c.RedisTLSCAFile)
	if err == nil {
		f.Close()
	}
	return err == nil
}

// validRedisClientCert checks one file of the Redis client certificate
// pair, given: readable, with the other, over rediss:// (a half pair is
// one line, the given file's). That the two make a pair is redisclient's
// check, at start.
func (c Config) validRedisClientCert(file, other string) bool {
	return file == "" || c.tls() && other != "" && readableOrEmpty(file)
}

// validOTLPEndpoint: empty, or an endpoint the protocol takes (a bad
// protocol is its own rule's error).
func (c Config) validOTLPEndpoint() bool {
	proto := c.OTLPProtocol
	if proto != tracing.ProtocolHTTP {
		proto = tracing.ProtocolGRPC
	}
	return c.OTLPEndpoint == "" || tracing.CheckEndpoint(c.OTLPEndpoint, proto) == nil
}

// redactURL hides a URL's password, which must not reach the logs.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// quote shows a value in an error: strings quoted, so that an empty or
// blank one is visible.
func quote(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// envPrefix starts every variable of ours. Each Config field's envconfig
// tag is its whole name, prefix included, read by envconfig.Process with
// no prefix of its own: for a tagged field envconfig looks up the prefixed
// name and then, unset, the tag alone (its "Alt" name), which here is the
// same name. Tagged "GRPC_ADDR" under the prefix "EXTAUTHZ", the fallback
// would read a bare GRPC_ADDR (or REDIS_URL) meant for another program, or
// one Kubernetes injects into every pod. Its split_words naming, which has
// no fallback, cannot spell nine of our names (GRPCTLSCert reads as
// GRPCTLS_CERT, GRPCTLSClientSANs as GRPCTLS_CLIENT_SA_NS).
// TestEveryVariableIsPrefixed keeps every tag under the prefix.
const envPrefix = "EXTAUTHZ_"

// readEnv sets every field of cfg from its EXTAUTHZ_* variable in the
// process environment or, unset, from its default tag.
func readEnv(cfg *Config) error {
	return envconfig.Process("", cfg)
}

// varName is the variable a Config field is read from.
func varName(f reflect.StructField) string { return f.Tag.Get("envconfig") }

// headerPairs is EXTAUTHZ_XDS_HEADERS: envconfig's map form,
// key:value,key:value, except that a value may hold ':' (a bearer token
// or a URL often does), where envconfig's own map parsing refuses it.
type headerPairs map[string]string

// Decode implements envconfig.Decoder.
func (p *headerPairs) Decode(s string) error {
	m, err := parsePairs(s)
	*p = m
	return err
}

// parsePairs reads envconfig's map form, key:value,key:value (the value
// may hold ':'); empty is no pairs (nil).
func parsePairs(s string) (map[string]string, error) {
	var m map[string]string
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key:value", pair)
		}
		if m == nil {
			m = map[string]string{}
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return m, nil
}
