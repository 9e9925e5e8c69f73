package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/internal/certsource"
)

// listenRules check the gRPC port's TLS files and Unix socket.
func (c Config) listenRules() []rule {
	pair := (c.GRPCTLSCert == "") == (c.GRPCTLSKey == "")
	return []rule{
		{"GRPC_TLS_CERT", "empty, or a readable PEM file, with EXTAUTHZ_GRPC_TLS_KEY", c.GRPCTLSCert, pair && readableOrEmpty(c.GRPCTLSCert)},
		{"GRPC_TLS_KEY", "empty, or a readable PEM file, with EXTAUTHZ_GRPC_TLS_CERT", c.GRPCTLSKey, pair && readableOrEmpty(c.GRPCTLSKey)},
		{"GRPC_TLS_CLIENT_CA", "empty, or a readable PEM file with EXTAUTHZ_GRPC_TLS_CERT set", c.GRPCTLSClientCA,
			c.GRPCTLSClientCA == "" || (c.grpcTLS() && readableOrEmpty(c.GRPCTLSClientCA))},
		{"GRPC_TLS_CLIENT_SANS", "empty, or comma-separated names with EXTAUTHZ_GRPC_TLS_CLIENT_CA set", c.GRPCTLSClientSANs,
			c.GRPCTLSClientSANs == "" || (c.GRPCTLSClientCA != "" && len(c.clientSANs()) > 0)},
		{"GRPC_TLS_RELOAD", "a duration of 1s or more, e.g. 10s", c.GRPCTLSReload, c.GRPCTLSReload >= time.Second},
		{"GRPC_UDS", "empty, or a socket path in an existing directory", c.GRPCUDS, c.GRPCUDS == "" || dirExists(filepath.Dir(c.GRPCUDS))},
	}
}

func (c Config) grpcTLS() bool { return c.GRPCTLSCert != "" && c.GRPCTLSKey != "" }

// clientSANs splits GRPCTLSClientSANs, dropping empty items.
func (c Config) clientSANs() []string {
	var out []string
	for _, s := range strings.Split(c.GRPCTLSClientSANs, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func readableOrEmpty(path string) bool {
	if path == "" {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}

// grpcTLS is the gRPC port's TLS identity: nil without TLS.
type grpcTLS struct {
	src      *certsource.Source
	interval time.Duration
	reloads  *prometheus.CounterVec
}

// newGRPCTLS loads the TLS files now (an error names the file) and
// registers extauthz_grpc_tls_* on reg.
func newGRPCTLS(cfg Config, reg prometheus.Registerer) (*grpcTLS, error) {
	if !cfg.grpcTLS() {
		return nil, nil
	}
	src, err := certsource.New(certsource.Files{Cert: cfg.GRPCTLSCert, Key: cfg.GRPCTLSKey,
		ClientCA: cfg.GRPCTLSClientCA, ClientSANs: cfg.clientSANs()})
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_GRPC_TLS_*: %w", err)
	}
	t := &grpcTLS{src: src, interval: cfg.GRPCTLSReload, reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_grpc_tls_reloads_total",
		Help: "Changes of the gRPC port's TLS files taken up (result=ok) or refused, the last good certificate serving on (result=error).",
	}, []string{"result"})}
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "extauthz_grpc_tls_certificate_expiry_timestamp_seconds",
		Help: "When the certificate the gRPC port serves expires (Unix time).",
	}, func() float64 { return float64(src.NotAfter().Unix()) })
	for _, c := range []prometheus.Collector{t.reloads, expiry} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Both results exist from the start at 0, as every series whose labels
	// are known in advance (docs/reference.md): an alert on errors then
	// sees the first one as an increase.
	t.reloads.WithLabelValues("ok")
	t.reloads.WithLabelValues("error")
	return t, nil
}

// wrap serves ln with TLS; nil t leaves it plaintext.
func (t *grpcTLS) wrap(ln net.Listener) net.Listener {
	if t == nil {
		return ln
	}
	return tls.NewListener(ln, t.src.Config())
}

// watch reloads the files every interval until ctx ends.
func (t *grpcTLS) watch(ctx context.Context, log *slog.Logger) {
	if t == nil {
		return
	}
	t.src.Run(ctx, t.interval, func(_ bool, err error) {
		if err != nil {
			t.reloads.WithLabelValues("error").Inc()
			log.Error("grpc tls: new files refused; the last good certificate serves on", "err", err)
			return
		}
		t.reloads.WithLabelValues("ok").Inc()
		log.Info("grpc tls: new files taken up", "not_after", t.src.NotAfter())
	})
}

// listenUnix listens on the socket at path, replacing a socket left by an
// earlier process (never another kind of file), readable and writable by
// the owner and group only: an Envoy in another container of the pod
// connects through a shared group (Kubernetes fsGroup).
func listenUnix(path string) (net.Listener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
