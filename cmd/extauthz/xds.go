package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/internal/adsclient"
	"github.com/extauthz/extauthz/internal/certsource"
	"github.com/extauthz/extauthz/pkg/policy"
	"github.com/extauthz/extauthz/pkg/policy/rlsconf"
)

// Policy sources (EXTAUTHZ_POLICY_SOURCE).
const (
	sourceFile = "file"
	sourceXDS  = "xds"
)

// policySourceKind resolves EXTAUTHZ_POLICY_SOURCE's empty default.
func (c Config) policySourceKind() string {
	if c.PolicySource == "" && c.XDSServerURL != "" {
		return sourceXDS
	}
	if c.PolicySource == "" {
		return sourceFile
	}
	return c.PolicySource
}

// xdsRules check the xDS client's variables.
func (c Config) xdsRules() []rule {
	pair := (c.XDSClientTLSCert == "") == (c.XDSClientTLSKey == "")
	_, metaErr := c.xdsNodeMetadata()
	return []rule{
		{"POLICY_SOURCE", "empty, file or xds (xds with EXTAUTHZ_XDS_SERVER_URL set)", c.PolicySource,
			c.PolicySource == "" || c.PolicySource == sourceFile || (c.PolicySource == sourceXDS && c.XDSServerURL != "")},
		{"XDS_SERVER_URL", "empty, or host:port of the xDS server", c.XDSServerURL, c.XDSServerURL == "" || validHostPort(c.XDSServerURL)},
		{"XDS_NODE_ID", "a non-empty node id", c.XDSNodeID, c.XDSNodeID != ""},
		{"XDS_NODE_METADATA", "empty, or comma-separated key=value pairs", c.XDSNodeMetadata, metaErr == nil},
		{"XDS_SERVER_TLS_CA", "empty, or a readable PEM file with EXTAUTHZ_XDS_SERVER_USE_TLS=true", c.XDSServerTLSCA,
			c.XDSServerTLSCA == "" || (c.XDSServerUseTLS && readableOrEmpty(c.XDSServerTLSCA))},
		{"XDS_SERVER_TLS_SAN", "empty unless EXTAUTHZ_XDS_SERVER_USE_TLS=true", c.XDSServerTLSSAN, c.XDSServerTLSSAN == "" || c.XDSServerUseTLS},
		{"XDS_CLIENT_TLS_CERT", "empty, or a readable PEM file, with EXTAUTHZ_XDS_CLIENT_TLS_KEY and EXTAUTHZ_XDS_SERVER_USE_TLS=true", c.XDSClientTLSCert,
			pair && readableOrEmpty(c.XDSClientTLSCert) && (c.XDSClientTLSCert == "" || c.XDSServerUseTLS)},
		{"XDS_CLIENT_TLS_KEY", "empty, or a readable PEM file, with EXTAUTHZ_XDS_CLIENT_TLS_CERT", c.XDSClientTLSKey, pair && readableOrEmpty(c.XDSClientTLSKey)},
		{"XDS_MAX_RECV_BYTES", fmt.Sprintf("0 (gRPC's 4 MiB) or %d to %d", minGRPCMessage, maxGRPCMessage), c.XDSMaxRecvBytes,
			c.XDSMaxRecvBytes == 0 || (c.XDSMaxRecvBytes >= minGRPCMessage && c.XDSMaxRecvBytes <= maxGRPCMessage)},
		{"XDS_BACKOFF_MIN", "a duration above 0, e.g. 500ms", c.XDSBackoffMin, c.XDSBackoffMin > 0},
		{"XDS_BACKOFF_MAX", "a duration not below EXTAUTHZ_XDS_BACKOFF_MIN, e.g. 30s", c.XDSBackoffMax, c.XDSBackoffMax >= c.XDSBackoffMin},
	}
}

func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	return err == nil && host != "" && port != ""
}

// xdsNodeMetadata parses EXTAUTHZ_XDS_NODE_METADATA into the node's
// metadata (string values).
func (c Config) xdsNodeMetadata() (*structpb.Struct, error) {
	fields := map[string]any{}
	for _, kv := range strings.Split(c.XDSNodeMetadata, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		fields[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return structpb.NewStruct(fields)
}

// xdsCredentials are the TLS settings of the connection to the server; nil
// is plaintext.
func (c Config) xdsCredentials() (credentials.TransportCredentials, error) {
	if !c.XDSServerUseTLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.XDSServerTLSSAN}
	if c.XDSServerTLSCA != "" {
		pem, err := os.ReadFile(c.XDSServerTLSCA)
		if err != nil {
			return nil, fmt.Errorf("EXTAUTHZ_XDS_SERVER_TLS_CA: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("EXTAUTHZ_XDS_SERVER_TLS_CA=%q: no PEM certificate in it", c.XDSServerTLSCA)
		}
	}
	if c.XDSClientTLSCert != "" {
		cc, err := certsource.NewClientCert(c.XDSClientTLSCert, c.XDSClientTLSKey)
		if err != nil {
			return nil, fmt.Errorf("EXTAUTHZ_XDS_CLIENT_TLS_CERT, _KEY: %w", err)
		}
		cfg.GetClientCertificate = cc.Get
	}
	return credentials.NewTLS(cfg), nil
}

// xdsPolicy is the policy delivered over xDS: each response is validated
// like files and swapped in whole, or refused while the last good one
// serves on.
type xdsPolicy struct {
	current  atomic.Pointer[policy.Policy]
	received atomic.Bool // a good update arrived
	force    bool
	opts     policy.LoadOptions
	updates  *prometheus.CounterVec
	log      *slog.Logger
	// onFirst, set before Run, hears the first good update.
	onFirst func()
}

// Current returns the policy in force: before the first update, an empty
// one (nothing matches), whether or not the process is ready.
func (x *xdsPolicy) Current() *policy.Policy { return x.current.Load() }

// notReady says why the process should not get traffic yet, or "".
func (x *xdsPolicy) notReady() string {
	if x.force || x.received.Load() {
		return ""
	}
	return "no policy received over xDS yet (EXTAUTHZ_XDS_FORCE_START=true serves without one)"
}

// apply validates one response's resources and swaps them in.
func (x *xdsPolicy) apply(version string, resources []*anypb.Any) error {
	p, err := x.load(resources)
	if err != nil {
		x.updates.WithLabelValues("rejected").Inc()
		x.log.Error("xds policy rejected; the last good policy stays in force", "version", version, "err", err)
		return err
	}
	x.current.Store(p)
	x.updates.WithLabelValues("applied").Inc()
	x.log.Info("xds policy applied", "version", version, "resources", len(resources), "domains", len(p.Domains))
	if !x.received.Swap(true) && x.onFirst != nil {
		x.onFirst()
	}
	return nil
}

func (x *xdsPolicy) load(resources []*anypb.Any) (*policy.Policy, error) {
	configs := make([]*rlsconfv3.RateLimitConfig, len(resources))
	var errs []error
	for i, r := range resources {
		configs[i] = &rlsconfv3.RateLimitConfig{}
		if err := r.UnmarshalTo(configs[i]); err != nil {
			errs = append(errs, fmt.Errorf("resources[%d]: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rlsconf.Load(configs, x.opts)
}

// newXDSPolicySource builds the xDS client; its run follows the server.
func newXDSPolicySource(cfg Config, opts policy.LoadOptions, updates *prometheus.CounterVec, log *slog.Logger) (*policySource, error) {
	meta, err := cfg.xdsNodeMetadata()
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_XDS_NODE_METADATA: %w", err)
	}
	creds, err := cfg.xdsCredentials()
	if err != nil {
		return nil, err
	}
	x := &xdsPolicy{force: cfg.XDSForceStart, opts: opts, updates: updates, log: log}
	x.current.Store(&policy.Policy{Domains: map[string]*policy.Domain{}})
	client, err := adsclient.New(adsclient.Config{
		Target:       cfg.XDSServerURL,
		Node:         &corev3.Node{Id: cfg.XDSNodeID, Cluster: cfg.XDSNodeCluster, Metadata: meta},
		TypeURL:      rlsconf.TypeURL,
		Credentials:  creds,
		Headers:      cfg.XDSHeaders,
		MaxRecvBytes: cfg.XDSMaxRecvBytes,
		MinBackoff:   cfg.XDSBackoffMin,
		MaxBackoff:   cfg.XDSBackoffMax,
		Apply:        x.apply,
		OnStreamError: func(err error, retryIn time.Duration) {
			log.Warn("xds stream ended; reconnecting", "server", cfg.XDSServerURL, "err", err, "retry_in", retryIn.Round(time.Millisecond))
		},
	})
	if err != nil {
		return nil, err
	}
	if cfg.Config != "" {
		// An operator who points the service at an xDS server means that
		// server, whatever else the environment holds.
		log.Warn("EXTAUTHZ_CONFIG is ignored: the policy comes over xds (EXTAUTHZ_POLICY_SOURCE=file reads the files instead)", "config", cfg.Config)
	}
	log.Info("policy from xds", "server", cfg.XDSServerURL, "node_id", cfg.XDSNodeID, "tls", cfg.XDSServerUseTLS,
		"mtls", cfg.XDSClientTLSCert != "", "force_start", cfg.XDSForceStart)
	return &policySource{
		PolicySource: x,
		run:          client.Run,
		notReady:     x.notReady,
		onReady:      func(f func()) { x.onFirst = f },
	}, nil
}
