package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
)

// policySource is the running policy: a watcher over EXTAUTHZ_CONFIG, or an
// empty policy when no path is configured.
type policySource struct {
	envoy.PolicySource
	// run watches for changes until ctx ends; nil when nothing is watched.
	run func(ctx context.Context) error
}

// newPolicySource loads the policy at path (failing when the first load
// fails: starting without the intended limits would silently enforce none)
// and counts later reloads on reg.
func newPolicySource(path string, opts policy.LoadOptions, reg prometheus.Registerer, log *slog.Logger) (*policySource, error) {
	reloads := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "extauthz_policy_reloads_total",
		Help: "Policy reloads that took effect after a change on disk.",
	})
	reloadErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "extauthz_policy_reload_errors_total",
		Help: "Policy reloads that failed; the last good policy stays in force.",
	})
	for _, c := range []prometheus.Collector{reloads, reloadErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register policy metrics: %w", err)
		}
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
