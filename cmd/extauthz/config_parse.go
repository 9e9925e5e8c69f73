package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"time"

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
		name := f.Tag.Get("envconfig")
		v, ok := lookup("EXTAUTHZ_" + name)
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
		_, err = strconv.Atoi(v)
		return "an integer", err
	case t.Kind() == reflect.Bool:
		_, err = strconv.ParseBool(v)
		return "true or false", err
	case t.Kind() == reflect.Float64:
		_, err = strconv.ParseFloat(v, 64)
		return "a number", err
	}
	return "a string", nil
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

func (c Config) validRedisURL() bool {
	if c.RedisURL == "" {
		return true
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
