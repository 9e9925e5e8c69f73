package k8s

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// configMapDir lays out files the way the kubelet mounts a ConfigMap: the
// data in a timestamped directory, "..data" a symlink to it, and each key a
// symlink through "..data". update swaps "..data" atomically, as the
// kubelet does when the ConfigMap changes.
type configMapDir struct {
	t    *testing.T
	dir  string
	gen  int
	prev string
}

func newConfigMapDir(t *testing.T, data map[string]string) *configMapDir {
	c := &configMapDir{t: t, dir: t.TempDir()}
	c.update(data)
	for name := range data {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(c.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *configMapDir) update(data map[string]string) {
	c.t.Helper()
	c.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%09d", c.gen, c.gen)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		c.t.Fatal(err)
	}
	for name, body := range data {
		if err := os.WriteFile(filepath.Join(c.dir, ts, name), []byte(body), 0o644); err != nil {
			c.t.Fatal(err)
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		c.t.Fatal(err)
	}
	if c.prev != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, c.prev)); err != nil {
			c.t.Fatal(err)
		}
	}
	c.prev = ts
}

// manifestEnv is the literal EXTAUTHZ_ environment of the rendered
// Deployment; values from Secrets are left out (no Redis: memory store).
func manifestEnv(c *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, envPrefix) && e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// TestBinaryServesAndDrains runs the Dockerfile-built binary with the base
// Deployment's environment and its policy ConfigMap mounted the kubelet's
// way: it answers the gRPC health check and /healthz and /readyz, enforces
// the ConfigMap's policy, reloads it when the ConfigMap changes, and exits 0
// on SIGTERM within its drain timeout.
func TestBinaryServesAndDrains(t *testing.T) {
	t.Parallel()
	bin := dockerBinary(t)
	objs := renderObjects(t, "k8s/base")
	c := extauthzContainer(t, named[*appsv1.Deployment](t, objs, appName))
	data := named[*corev1.ConfigMap](t, objs, policyConfigMap).Data
	mount := newConfigMapDir(t, data)

	env := manifestEnv(c)
	env["EXTAUTHZ_CONFIG"] = mount.dir
	var kv []string
	for k, v := range env {
		if k != "EXTAUTHZ_GRPC_ADDR" && k != "EXTAUTHZ_HTTP_ADDR" {
			kv = append(kv, k+"="+v)
		}
	}
	p := start(t, bin, kv)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	waitServing(t, p, conn)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := httpGet(t, p.httpAddr, path); code != http.StatusOK {
			t.Errorf("GET %s = %d, want 200", path, code)
		}
	}

	rls := rlsv3.NewRateLimitServiceClient(conn)
	if got := meshLimit(t, rls, "t-before"); got != 100 {
		t.Fatalf("domain mesh (tenant, scope=all) limit = %d, want 100 from %s", got, policyConfigMap)
	}
	changed := strings.Replace(data["mesh.yaml"], "requests_per_unit: 100,", "requests_per_unit: 7,", 1)
	if changed == data["mesh.yaml"] {
		t.Fatal("mesh.yaml no longer has the (scope=all) limit this test edits")
	}
	mount.update(map[string]string{"mesh.yaml": changed, "http.yaml": data["http.yaml"]})
	waitFor(t, 15*time.Second, "the ConfigMap update to be reloaded", func(i int) bool {
		return meshLimit(t, rls, fmt.Sprintf("t-after-%d", i)) == 7
	})

	checkDrain(t, p, c)
}

// waitServing polls grpc.health.v1 (the probes' check) until SERVING.
func waitServing(t *testing.T, p *process, conn *grpc.ClientConn) {
	t.Helper()
	health := healthpb.NewHealthClient(conn)
	waitFor(t, 30*time.Second, "grpc.health.v1 SERVING", func(int) bool {
		if exited, err := p.wait(0); exited {
			t.Fatalf("extauthz exited during startup: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

func httpGet(t *testing.T, addr, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// meshLimit asks for the (tenant, scope=all) descriptor the mesh's
// EnvoyFilter sends and returns the limit extauthz reports for it.
func meshLimit(t *testing.T, rls rlsv3.RateLimitServiceClient, tenant string) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "mesh",
		Descriptors: []*commonrlv3.RateLimitDescriptor{{Entries: []*commonrlv3.RateLimitDescriptor_Entry{
			{Key: "tenant", Value: tenant}, {Key: "scope", Value: "all"},
		}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 1 {
		t.Fatalf("ShouldRateLimit = %v, want one OK status", resp)
	}
	return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
}

// checkDrain: SIGTERM ends the process with status 0 within the drain
// delay and shutdown timeout the manifest configures (plus a margin for
// the exit itself).
func checkDrain(t *testing.T, p *process, c *corev1.Container) {
	t.Helper()
	vars := configVars(t)
	drain := duration(t, vars, c, "EXTAUTHZ_DRAIN_DELAY") + duration(t, vars, c, "EXTAUTHZ_SHUTDOWN_TIMEOUT")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited, err := p.wait(drain + 5*time.Second)
	switch {
	case !exited:
		t.Fatalf("still running %s after SIGTERM", drain+5*time.Second)
	case err != nil:
		t.Fatalf("exit after SIGTERM: %v, want status 0", err)
	}
}

// waitFor polls cond every 50ms until it holds or d passes. The deadline
// only bounds a wait for an asynchronous event; nothing is asserted about
// timing.
func waitFor(t *testing.T, d time.Duration, what string, cond func(i int) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		if cond(i) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
