package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/admin"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// The admin listener (EXTAUTHZ_ADMIN_ADDR) serves pkg/admin: counters read
// and reset, decisions explained, idempotency records inspected and
// deleted. Off by default; without a token it binds to loopback only (reach
// it with kubectl port-forward), with one it may listen anywhere.

// minAdminToken is the shortest token accepted: a guessable one would turn
// "reset any tenant's counter" into a public endpoint.
const minAdminToken = 16

// adminToken returns the configured token (EXTAUTHZ_ADMIN_TOKEN, or the
// trimmed contents of EXTAUTHZ_ADMIN_TOKEN_FILE), "" when none.
func (c Config) adminToken() (string, error) {
	if c.AdminTokenFile == "" {
		return c.AdminToken, nil
	}
	b, err := os.ReadFile(c.AdminTokenFile)
	return strings.TrimSpace(string(b)), err
}

func (c Config) validAdminTokenFile() bool {
	if c.AdminTokenFile == "" {
		return true
	}
	tok, err := c.adminToken()
	return err == nil && len(tok) >= minAdminToken
}

// validAdminAddr: empty, or host:port that is loopback unless a token is
// configured (a bad token is its own rule's line).
func (c Config) validAdminAddr() bool {
	if c.AdminAddr == "" {
		return true
	}
	if !validAddr(c.AdminAddr) {
		return false
	}
	return c.AdminToken != "" || c.AdminTokenFile != "" || checkDebugAddr(c.AdminAddr) == nil
}

// adminDeps is what the admin API reads and resets: the stores as the
// servers use them, without tracing (an operator's look is no decision).
type adminDeps struct {
	limits   ratelimit.Store
	idem     idempotencyDeps
	policies envoy.PolicySource
	reg      prometheus.Registerer
	log      *slog.Logger
}

// startOperatorListeners starts the admin API and the pprof endpoint when
// configured, and returns what stops both.
func startOperatorListeners(cfg Config, d adminDeps) (stop func(), err error) {
	stopAdmin, err := startAdmin(cfg, d)
	if err != nil || cfg.DebugAddr == "" {
		return stopAdmin, err
	}
	stopDebug, err := startDebug(cfg.DebugAddr, d.log)
	if err != nil {
		stopAdmin()
		return nil, err
	}
	return func() { stopDebug(); stopAdmin() }, nil
}

// startAdmin serves the admin API on cfg.AdminAddr (already validated)
// until the returned stop is called; it does nothing when the address is
// empty. A listen failure is returned: an operator who asked for the API
// should learn at once that there is none.
func startAdmin(cfg Config, d adminDeps) (stop func(), err error) {
	if cfg.AdminAddr == "" {
		return func() {}, nil
	}
	api, err := newAdminAPI(cfg, d)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_ADMIN_ADDR=%q: %w", cfg.AdminAddr, err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	tok, _ := cfg.adminToken() // validated
	d.log.Info("admin listening", "addr", ln.Addr().String(), "token", tok != "")
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("admin server failed", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	}, nil
}

// newAdminAPI builds the API over servers of its own, configured as the
// served ones, so that explanations follow the same options.
func newAdminAPI(cfg Config, d adminDeps) (*admin.API, error) {
	resetter, ok := d.limits.(ratelimit.Resetter)
	if !ok {
		return nil, fmt.Errorf("admin: the rate-limit store %T cannot be reset", d.limits)
	}
	records, _ := d.idem.store.(idempotency.Inspector)         // nil: the record endpoints answer 501
	metrics, err := envoy.NewMetrics(prometheus.NewRegistry()) // explanations count nothing
	if err != nil {
		return nil, err
	}
	r, err := rls.NewRLS(d.limits, d.policies, metrics, rlsOptions(cfg, d.log)...)
	if err != nil {
		return nil, err
	}
	events, err := authz.NewIdempotencyMetrics(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	// The lockout store, so that explain shows a charged limit's lockout;
	// no metrics: explain checks and charges nothing.
	// The served key secret, so that explain names the served keys.
	charges := authz.WithCharges(d.limits, d.idem.charges.lockouts, nil)
	keys := authz.WithChargeKeySecret(d.idem.charges.keySecret, nil)
	az, err := authz.NewAuthz(d.limits, d.idem.store, d.policies, metrics, events, authz.WithInFlight(d.idem.inFlight), charges, keys)
	if err != nil {
		return nil, err
	}
	tok, _ := cfg.adminToken() // validated
	return admin.New(admin.Options{RLS: r, HTTP: az, Limits: resetter, Records: records, Policies: d.policies,
		Token: tok, Registerer: d.reg, Audit: auditLogger(d.log)})
}

// auditLogger writes every admin call to the log at INFO (WARN when
// refused for the token), the audit trail an operator's change leaves.
func auditLogger(log *slog.Logger) func(admin.Audit) {
	return func(a admin.Audit) {
		level := slog.LevelInfo
		if a.Status == http.StatusUnauthorized {
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, "admin call", "remote", a.Remote, "authenticated", a.Authenticated,
			"endpoint", a.Endpoint, "method", a.Method, "status", a.Status, "keys", a.Keys, "detail", a.Detail)
	}
}

// The Redis stack resets through its layers (over-limit cache, failover,
// Redis store); redisBacked passes the Resetter through.
var _ ratelimit.Resetter = (*redisBacked)(nil)

func (r *redisBacked) StateKeys(req ratelimit.Request) []string {
	if in, ok := r.Store.(ratelimit.Resetter); ok {
		return in.StateKeys(req)
	}
	return nil
}

func (r *redisBacked) Reset(ctx context.Context, reqs []ratelimit.Request) error {
	in, ok := r.Store.(ratelimit.Resetter)
	if !ok {
		return ratelimit.ErrNotResettable
	}
	return in.Reset(ctx, reqs)
}
