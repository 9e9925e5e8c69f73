package k8s

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	istionetworking "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The timeout table of docs/reference.md, checked on every shipped configuration:
//
//	EXTAUTHZ_REDIS_CALL_TIMEOUT        < ratelimit filter timeout, ext_authz timeout
//	EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT < ext_authz timeout, ext_proc message_timeout
//	health check interval × unhealthy_threshold + timeout < EXTAUTHZ_DRAIN_DELAY
//	retry_back_off.max_interval (Envoy's per-try timeout) > every filter timeout
//	preStop + EXTAUTHZ_DRAIN_DELAY + EXTAUTHZ_SHUTDOWN_TIMEOUT < terminationGracePeriodSeconds
//	liveness period × failureThreshold > EXTAUTHZ_DRAIN_DELAY + EXTAUTHZ_SHUTDOWN_TIMEOUT
//
// so that extauthz, not Envoy's timeout, answers a slow Redis (its
// failure mode decides), and a draining replica leaves Envoy's rotation
// while it still serves.

// deadlines are the binary's own bounds, as one deployment sets them.
type deadlines struct {
	source                                   string
	redisCall, idemStore, drain, shutdownMax time.Duration
}

func binaryDeadlines(t *testing.T, vars map[string]envVar, c *corev1.Container, source string) deadlines {
	t.Helper()
	return deadlines{
		source:      source,
		redisCall:   duration(t, vars, c, "EXTAUTHZ_REDIS_CALL_TIMEOUT"),
		idemStore:   duration(t, vars, c, "EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT"),
		drain:       duration(t, vars, c, "EXTAUTHZ_DRAIN_DELAY"),
		shutdownMax: duration(t, vars, c, "EXTAUTHZ_SHUTDOWN_TIMEOUT"),
	}
}

// filterTimeouts are the deadlines Envoy puts on calls to extauthz; zero
// where the configuration has no such filter.
type filterTimeouts struct {
	ratelimit, extAuthz, extProcMessage time.Duration
	retries                             []*corev3.RetryPolicy
}

func (f filterTimeouts) check(t *testing.T, where string, d deadlines) {
	t.Helper()
	less := func(a time.Duration, aName string, b time.Duration, bName string) {
		if b != 0 && a >= b {
			t.Errorf("%s: %s (%s, %s) must be below %s (%s): Envoy would give up first and decide by its own failure mode", where, aName, a, d.source, bName, b)
		}
	}
	less(d.redisCall, "EXTAUTHZ_REDIS_CALL_TIMEOUT", f.ratelimit, "the ratelimit filter timeout")
	less(d.redisCall, "EXTAUTHZ_REDIS_CALL_TIMEOUT", f.extAuthz, "the ext_authz timeout")
	less(d.idemStore, "EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT", f.extAuthz, "the ext_authz timeout")
	less(d.idemStore, "EXTAUTHZ_IDEMPOTENCY_STORE_TIMEOUT", f.extProcMessage, "the ext_proc message_timeout")
	longest := max(f.ratelimit, f.extAuthz, f.extProcMessage)
	for _, rp := range f.retries {
		checkRetry(t, where, rp, longest)
	}
}

// checkRetry: only calls that never reached extauthz are retried, and the
// per-try timeout Envoy derives from max_interval never cuts a call early.
func checkRetry(t *testing.T, where string, rp *corev3.RetryPolicy, longest time.Duration) {
	t.Helper()
	safe := map[string]bool{"connect-failure": true, "refused-stream": true, "reset-before-request": true}
	for _, on := range strings.Split(rp.GetRetryOn(), ",") {
		if !safe[strings.TrimSpace(on)] {
			t.Errorf("%s: retry_on %q could retry a call extauthz processed (a decision counted twice); use only connect-failure, refused-stream, reset-before-request", where, on)
		}
	}
	if mi := rp.GetRetryBackOff().GetMaxInterval(); mi == nil || mi.AsDuration() <= longest {
		t.Errorf("%s: retry_back_off.max_interval %v is Envoy's per-try timeout: it must exceed the filter timeouts (%s)", where, mi.AsDuration(), longest)
	}
}

func dur(d *durationpb.Duration) time.Duration { return d.AsDuration() }

// envoyBootstrap strictly decodes one envoy/ file.
func envoyBootstrap(t *testing.T, name string) *bootstrapv3.Bootstrap {
	t.Helper()
	j, err := yaml.YAMLToJSON(readFile(t, filepath.Join(repoRoot(t), "envoy", name)))
	if err != nil {
		t.Fatalf("envoy/%s: %v", name, err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(j, &b); err != nil {
		t.Fatalf("envoy/%s: %v", name, err)
	}
	return &b
}

// bootstrapTimeouts collects the extauthz filters' timeouts of every HTTP
// connection manager in b.
func bootstrapTimeouts(t *testing.T, where string, b *bootstrapv3.Bootstrap) filterTimeouts {
	t.Helper()
	var f filterTimeouts
	for _, l := range b.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, nf := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if err := nf.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					continue
				}
				for _, hf := range hcm.GetHttpFilters() {
					cfg, err := hf.GetTypedConfig().UnmarshalNew()
					if err != nil {
						t.Fatalf("%s: filter %s: %v", where, hf.GetName(), err)
					}
					f.add(cfg)
				}
			}
		}
	}
	return f
}

func (f *filterTimeouts) add(cfg any) {
	var gs *corev3.GrpcService
	switch c := cfg.(type) {
	case *ratelimitv3.RateLimit:
		f.ratelimit = ratelimitTimeout(c)
		gs = c.GetRateLimitService().GetGrpcService()
	case *extauthzv3.ExtAuthz:
		f.extAuthz = extAuthzTimeout(c.GetGrpcService())
		gs = c.GetGrpcService()
	case *extprocv3.ExternalProcessor:
		f.extProcMessage = extProcTimeout(c)
		gs = c.GetGrpcService()
	}
	if rp := gs.GetRetryPolicy(); rp != nil {
		f.retries = append(f.retries, rp)
	}
}

// Envoy's defaults where a field is unset.
func ratelimitTimeout(c *ratelimitv3.RateLimit) time.Duration {
	if c.GetTimeout() == nil {
		return 20 * time.Millisecond
	}
	return dur(c.GetTimeout())
}

func extAuthzTimeout(g *corev3.GrpcService) time.Duration {
	if g.GetTimeout() == nil {
		return 200 * time.Millisecond
	}
	return dur(g.GetTimeout())
}

func extProcTimeout(c *extprocv3.ExternalProcessor) time.Duration {
	if c.GetMessageTimeout() == nil {
		return 200 * time.Millisecond
	}
	return dur(c.GetMessageTimeout())
}

// checkHealthChecks: the extauthz cluster is actively health-checked fast
// enough that a draining replica (NOT_SERVING at once) leaves the rotation
// before its drain delay ends, from the first second of an Envoy's life.
func checkHealthChecks(t *testing.T, where string, b *bootstrapv3.Bootstrap, d deadlines) {
	t.Helper()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != appName {
			continue
		}
		hcs := c.GetHealthChecks()
		if len(hcs) == 0 {
			t.Errorf("%s: cluster %s has no active health check: a draining replica would only leave on errors", where, c.GetName())
		}
		for _, hc := range hcs {
			detect := time.Duration(hc.GetUnhealthyThreshold().GetValue())*dur(hc.GetInterval()) + dur(hc.GetTimeout())
			if detect >= d.drain {
				t.Errorf("%s: health check interval × unhealthy_threshold + timeout = %s, not below EXTAUTHZ_DRAIN_DELAY (%s, %s)", where, detect, d.drain, d.source)
			}
			if nt := hc.GetNoTrafficInterval(); nt == nil || dur(nt) > dur(hc.GetInterval()) {
				t.Errorf("%s: no_traffic_interval %v: Envoy's default (60s) leaves a fresh Envoy blind to a drain for a minute", where, nt.AsDuration())
			}
			if hc.GetGrpcHealthCheck() == nil {
				t.Errorf("%s: the health check must be grpc.health.v1 (what the drain turns NOT_SERVING)", where)
			}
		}
		od := c.GetOutlierDetection()
		if od != nil && (od.GetMaxEjectionPercent() == nil || od.GetMaxEjectionPercent().GetValue() > 50) {
			t.Errorf("%s: outlier detection may eject more than half the replicas", where)
		}
	}
}

// TestTimeoutTable checks the table above on envoy/*.yaml (against the
// binary's defaults, as docker compose runs them), and on the Istio
// EnvoyFilters and mesh config (against the base Deployment's settings).
func TestTimeoutTable(t *testing.T) {
	t.Parallel()
	vars := configVars(t)
	defaults := binaryDeadlines(t, vars, &corev1.Container{}, "default")
	for _, name := range []string{"front-proxy.yaml", "sidecar.yaml"} {
		b := envoyBootstrap(t, name)
		where := "envoy/" + name
		f := bootstrapTimeouts(t, where, b)
		if f.ratelimit == 0 || f.extAuthz == 0 || f.extProcMessage == 0 {
			t.Errorf("%s: found timeouts %+v; expected the three filters", where, f)
		}
		f.check(t, where, defaults)
		checkHealthChecks(t, where, b, defaults)
	}

	c := extauthzContainer(t, named[*appsv1.Deployment](t, renderObjects(t, "k8s/base"), appName))
	deployed := binaryDeadlines(t, vars, c, "k8s/base")
	istioTimeouts(t).check(t, "k8s/istio", deployed)
}

// istioTimeouts collects the filter timeouts of the Istio EnvoyFilters,
// with ext_authz's from the mesh config's extension provider.
func istioTimeouts(t *testing.T) filterTimeouts {
	t.Helper()
	var mesh filterTimeouts
	for _, ef := range only[*istionetworking.EnvoyFilter](renderObjects(t, "k8s/istio/base")) {
		for i, cp := range ef.Spec.GetConfigPatches() {
			m, err := decodePatch(cp)
			if err != nil {
				t.Fatalf("%s patch %d: %v", ef.Name, i, err)
			}
			if hf, ok := m.(*hcmv3.HttpFilter); ok {
				cfg, err := hf.GetTypedConfig().UnmarshalNew()
				if err != nil {
					t.Fatalf("%s patch %d: %v", ef.Name, i, err)
				}
				mesh.add(cfg)
			}
		}
	}
	p := meshConfig(t).GetExtensionProviders()[0].GetEnvoyExtAuthzGrpc()
	mesh.extAuthz = 200 * time.Millisecond // Istio's default
	if p.GetTimeout() != nil {
		mesh.extAuthz = dur(p.GetTimeout())
	}
	return mesh
}

// checkProbeTimings: the liveness probe never restarts a draining pod
// (gRPC health is NOT_SERVING from SIGTERM on, and the port closes after
// the drain delay), whatever sent the signal.
func checkProbeTimings(t *testing.T, vars map[string]envVar, c *corev1.Container) {
	t.Helper()
	p := c.LivenessProbe
	if p == nil {
		return // checkProbes reports it
	}
	window := time.Duration(p.PeriodSeconds*max(p.FailureThreshold, 1)) * time.Second
	stop := duration(t, vars, c, "EXTAUTHZ_DRAIN_DELAY") + duration(t, vars, c, "EXTAUTHZ_SHUTDOWN_TIMEOUT")
	if window <= stop {
		t.Errorf("liveness probe fails after %s, within EXTAUTHZ_DRAIN_DELAY + EXTAUTHZ_SHUTDOWN_TIMEOUT = %s: it could restart a draining pod", window, stop)
	}
}
