package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
)

// policySource is the running policy: a watcher over EXTAUTHZ_CONFIG, an
// xDS client (xds.go), or an empty policy when neither is configured.
type policySource struct {
	envoy.PolicySource
	// run watches for changes until ctx ends; nil when nothing is watched.
	run func(ctx context.Context) error
	// notReady, when set, says why the process must not get traffic yet
	// (no policy received), or "".
	notReady func() string
	// onReady, when set, registers a function called once notReady turns "".
	onReady func(func())
}

// policyNotReady says why the policy keeps the process out of rotation, or "".
func (p *policySource) policyNotReady() string {
	if p.Current() == nil {
		return "policy not loaded"
	}
	if p.notReady != nil {
		return p.notReady()
	}
	return ""
}

// newPolicySource builds the source cfg selects (EXTAUTHZ_POLICY_SOURCE)
// and registers the policy metrics on reg.
func newPolicySource(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*policySource, error) {
	opts := policy.LoadOptions{MergeDomains: cfg.MergeDomains, DescriptorAlgorithm: cfg.descriptorAlgorithm(), RejectAccountKeys: cfg.accountKeysRefused()}
	updates := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_policy_xds_updates_total",
		Help: "Policy versions received over xDS, by result: applied, or rejected (NACKed; the last good policy stays).",
	}, []string{"result"})
	if err := reg.Register(updates); err != nil {
		return nil, fmt.Errorf("register policy metrics: %w", err)
	}
	for _, r := range []string{"applied", "rejected"} {
		updates.WithLabelValues(r)
	}
	if cfg.policySourceKind() == sourceXDS {
		if err := registerFileMetrics(reg); err != nil {
			return nil, err
		}
		return newXDSPolicySource(cfg, opts, updates, log)
	}
	src, err := newFilePolicySource(cfg.Config, opts, reg, log)
	if err != nil {
		return nil, fmt.Errorf("EXTAUTHZ_CONFIG=%q: policy: %w", cfg.Config, err)
	}
	return src, nil
}

// registerFileMetrics registers the file reload counters (at zero) for an
// xDS source, so dashboards and alerts find the same series whatever the
// source.
func registerFileMetrics(reg prometheus.Registerer) error {
	_, _, err := fileMetrics(reg)
	return err
}

func fileMetrics(reg prometheus.Registerer) (reloads, reloadErrors prometheus.Counter, err error) {
	reloads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "extauthz_policy_reloads_total",
		Help: "Policy reloads that took effect after a change on disk.",
	})
	reloadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "extauthz_policy_reload_errors_total",
		Help: "Policy reloads that failed; the last good policy stays in force.",
	})
	for _, c := range []prometheus.Collector{reloads, reloadErrors} {
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("register policy metrics: %w", err)
		}
	}
	return reloads, reloadErrors, nil
}

// newFilePolicySource loads the policy at path (failing when the first load
// fails: starting without the intended limits would silently enforce none)
// and counts later reloads on reg.
func newFilePolicySource(path string, opts policy.LoadOptions, reg prometheus.Registerer, log *slog.Logger) (*policySource, error) {
	reloads, reloadErrors, err := fileMetrics(reg)
	if err != nil {
		return nil, err
	}
	// Registered even without a policy, so dashboards and alerts find the
	// series whatever the configuration.
	if path == "" {
		empty := &policy.Policy{Domains: map[string]*policy.Domain{}}
		log.Warn("no policy configured (EXTAUTHZ_CONFIG is empty): no descriptor matches")
		return &policySource{PolicySource: envoy.PolicyFunc(func() *policy.Policy { return empty })}, nil
	}
	w, err := policy.NewWatcher(path, policy.WatcherOptions{
		Load: opts,
		OnReload: func(p *policy.Policy) {
			reloads.Inc()
			log.Info("policy reloaded", "files", len(p.Files), "domains", len(p.Domains))
		},
		OnError: func(err error) {
			reloadErrors.Inc()
			log.Error("policy reload failed; keeping the last good policy", "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	p := w.Current()
	log.Info("policy loaded", "path", path, "files", len(p.Files), "domains", len(p.Domains))
	return &policySource{PolicySource: w, run: w.Run}, nil
}

// gateReadiness keeps the process out of rotation until the policy is
// ready and the store warmed up.
func (s *server) gateReadiness(ctx context.Context, cfg Config) {
	s.gatePolicy()
	s.startWarmUp(ctx, cfg.warmAttemptTimeout(), warmMaxWait)
}

// gatePolicy holds gRPC health at NOT_SERVING while the policy is not
// ready, and announces SERVING when it becomes ready (unless the warm-up
// or a shutdown still holds it).
func (s *server) gatePolicy() {
	if s.policy.onReady == nil {
		return
	}
	if s.policy.policyNotReady() != "" {
		s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	}
	s.policy.onReady(func() {
		if s.warm.notReady() == "" && !s.draining.Load() {
			s.setServing(healthpb.HealthCheckResponse_SERVING)
			s.log.Info("policy received over xds: serving")
		}
	})
}
