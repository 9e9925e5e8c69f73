package container

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// onePerMinute is a policy whose (tenant, route=orders) budget is one call
// a minute, unlike the image's example policy (20/s, bursts of 40): a
// second decision refused proves the mounted policy is the one served.
const onePerMinute = `domain: edge
descriptors:
  - key: route
    value: orders
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestImageRunsLockedDown runs the image as a production cluster does
// (read-only root filesystem, no capabilities, no privilege escalation,
// the image's own user) with a policy directory mounted over the shipped
// one: it runs as 65532 with no capability, answers /healthz, /readyz and
// gRPC health, and decides with the mounted policy.
func TestImageRunsLockedDown(t *testing.T) {
	t.Parallel()
	policy := onePerMinuteDir(t)
	flags := append([]string{"-v", policy + ":/etc/extauthz/policy:ro", "-e", "EXTAUTHZ_DRAIN_DELAY=0s"}, lockedDown...)
	c := runImage(t, flags)

	if u := inspect(t, "{{.Config.User}}", image.name); u != "65532:65532" {
		t.Errorf("image USER %q, want 65532:65532", u)
	}
	checkProcess(t, inspect(t, "{{.State.Pid}}", c.id))
	for _, path := range []string{"/healthz", "/readyz"} {
		if err := getOK("http://" + c.httpAddr + path); err != nil {
			t.Error(err)
		}
	}
	checkGRPCHealth(t, c.grpcAddr)

	checkOnePerMinute(t, c, "127.0.0.1:9001")
}

// checkProcess reads the container's main process from the host's /proc:
// user and group 65532, no effective capability, no_new_privs set.
func checkProcess(t *testing.T, pid string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		t.Fatalf("the container's process: %v", err)
	}
	want := map[string]string{
		"Uid":        "65532\t65532\t65532\t65532",
		"Gid":        "65532\t65532\t65532\t65532",
		"CapEff":     "0000000000000000",
		"CapPrm":     "0000000000000000",
		"NoNewPrivs": "1",
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if w, ok := want[k]; ok {
			if v = strings.TrimSpace(v); v != w {
				t.Errorf("process %s: %s %q, want %q", pid, k, v, w)
			}
			delete(want, k)
		}
	}
	for k := range want {
		t.Errorf("process %s: no %s in /proc/%s/status", pid, k, pid)
	}
}

// checkGRPCHealth asks grpc.health.v1 for the server and the RLS service.
func checkGRPCHealth(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("gRPC health %q: %v, %v; want SERVING", svc, resp.GetStatus(), err)
		}
	}
}

// TestImageStartsAsBinRatelimit starts the image with the command Envoy
// Gateway gives its rate limit container, /bin/ratelimit: it serves on the
// peer's ports, gRPC on 8081 and /healthcheck on 8080, where Envoy Gateway
// sends its traffic and probes. Each case mounts a policy where the peer
// would read it (CONFIG_TYPE=FILE, the default): the image's own example
// policy must not win over it.
func TestImageStartsAsBinRatelimit(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		mount string   // where the policy directory is mounted
		env   []string // the peer's variables
	}{
		{"peer's default directory", "/srv/runtime_data/current/config", nil},
		{"RUNTIME_ROOT and RUNTIME_SUBDIRECTORY", "/data/ratelimit/config",
			[]string{"CONFIG_TYPE=FILE", "RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "USE_STATSD=false"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flags := []string{"--entrypoint", "/bin/ratelimit", "-e", "EXTAUTHZ_DRAIN_DELAY=0s",
				"-v", onePerMinuteDir(t) + ":" + tc.mount + ":ro"}
			for _, kv := range tc.env {
				flags = append(flags, "-e", kv)
			}
			c := runImageOn(t, "8081", "8080", "/healthcheck", append(flags, lockedDown...))
			checkGRPCHealth(t, c.grpcAddr)
			checkOnePerMinute(t, c, "127.0.0.1:8081")
		})
	}
}

// onePerMinuteDir is a directory holding the onePerMinute policy, readable
// by the image's user.
func onePerMinuteDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(onePerMinute), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkOnePerMinute asks the container's server on grpcAddr (inside it),
// through extauthz try, for two decisions on the onePerMinute budget: OK,
// then OVER_LIMIT proves that policy is the one served.
func checkOnePerMinute(t *testing.T, c *ctr, grpcAddr string) {
	t.Helper()
	for i, code := range []string{"OK", "OVER_LIMIT"} {
		out := mustDocker(t, "exec", c.id, "/usr/local/bin/extauthz", "try", "-addr", grpcAddr, "tenant=acme,route=orders")
		var answer struct {
			OverallCode string `json:"overallCode"`
		}
		if err := json.Unmarshal([]byte(out), &answer); err != nil {
			t.Fatalf("try %d: %v\n%s", i+1, err, out)
		}
		if answer.OverallCode != code {
			t.Errorf("try %d: overallCode %q, want %q (the mounted policy allows one a minute)", i+1, answer.OverallCode, code)
		}
	}
}

// sizeInDocs is how docs/containers.md records the image size.
var sizeInDocs = regexp.MustCompile(`\*\*Image size\*\*: ([0-9.]+) MB`)

// TestImageSize keeps the size docs/containers.md records true: the built
// image is within a quarter of it.
func TestImageSize(t *testing.T) {
	t.Parallel()
	needImage(t)
	b, err := os.ReadFile(filepath.Join(image.root, "docs", "containers.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := sizeInDocs.FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/containers.md records no %s", sizeInDocs)
	}
	documented, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	bytes, err := strconv.ParseFloat(inspect(t, "{{.Size}}", image.name), 64)
	if err != nil {
		t.Fatal(err)
	}
	if got := bytes / 1e6; math.Abs(got-documented) > documented/4 {
		t.Errorf("the image is %.1f MB; docs/containers.md says %.1f MB", got, documented)
	}
}
