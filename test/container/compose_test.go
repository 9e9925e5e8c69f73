package container

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// compose is one docker compose project of docker-compose.yaml, run from a
// clean copy of the repository, with the host ports of Envoy and the
// upstream chosen free (ENVOY_HOST_PORT, UPSTREAM_HOST_PORT): the machine
// may already use 10000 and 8080.
type compose struct {
	t       *testing.T
	dir     string
	project string
	// envoy and upstream are http://127.0.0.1:PORT, the walkthrough's
	// localhost:10000 and localhost:8080.
	envoy, upstream string
	env             []string
}

func newCompose(t *testing.T) *compose {
	t.Helper()
	needImage(t)
	c := &compose{t: t, dir: t.TempDir(), project: fmt.Sprintf("extauthz-test-%d", os.Getpid())}
	if err := copyRepo(image.root, c.dir); err != nil {
		t.Fatal(err)
	}
	envoyPort, upstreamPort := freePort(t), freePort(t)
	c.envoy = fmt.Sprintf("http://127.0.0.1:%d", envoyPort)
	c.upstream = fmt.Sprintf("http://127.0.0.1:%d", upstreamPort)
	c.env = []string{"COMPOSE_PROJECT_NAME=" + c.project, "DOCKER_BUILDKIT=1",
		"ENVOY_HOST_PORT=" + strconv.Itoa(envoyPort), "UPSTREAM_HOST_PORT=" + strconv.Itoa(upstreamPort)}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := c.run(context.Background(), "docker", "compose", "logs", "--no-color", "--tail", "40")
			t.Logf("docker compose logs:\n%s", out)
		}
		// Also the images compose built under this project's name.
		_, _ = c.run(context.Background(), "docker", "compose", "down", "-v", "--remove-orphans", "--rmi", "local")
	})
	return c
}

// run runs a command in the project directory with the project's
// environment.
func (c *compose) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (c *compose) must(name string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	out, err := c.run(ctx, name, args...)
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// leftovers lists the project's containers, networks and volumes.
func (c *compose) leftovers() string {
	c.t.Helper()
	filter := "label=com.docker.compose.project=" + c.project
	var left []string
	for _, kind := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
		out := mustDocker(c.t, append(kind, "-q", "--filter", filter)...)
		if out != "" {
			left = append(left, fmt.Sprintf("%s: %s", kind[0], strings.ReplaceAll(out, "\n", " ")))
		}
	}
	return strings.Join(left, "; ")
}

// TestComposeWalkthrough runs every command of docker-compose.yaml's header
// and docs/envoy.md's "docker compose" walkthrough, asserting what their
// comments promise, then `docker compose down -v` and checks that nothing
// of the project is left.
func TestComposeWalkthrough(t *testing.T) {
	t.Parallel()
	c := newCompose(t)
	// TOKEN=$(go run ./cmd/devjwt -sub acme -plan pro)
	token := c.must("go", "run", "./cmd/devjwt", "-sub", "acme", "-plan", "pro")
	// docker compose up --build (detached, waiting for the services)
	c.must("docker", "compose", "up", "--build", "--detach", "--wait")
	if err := waitOK(c.envoy+"/healthz", 2*time.Minute); err != nil {
		t.Fatalf("Envoy: %v", err)
	}
	bearer := "Bearer " + token

	// curl -i -H "authorization: Bearer $TOKEN" localhost:10000/things
	r := c.do(t, "GET", "/things", "", "authorization", bearer)
	if r.status != http.StatusOK || r.header.Get("RateLimit-Policy") == "" || r.header.Get("RateLimit") == "" {
		t.Errorf("GET /things with a token: %d, RateLimit-Policy %q, RateLimit %q; want 200 with both",
			r.status, r.header.Get("RateLimit-Policy"), r.header.Get("RateLimit"))
	}
	// curl -i localhost:10000/things: 401
	if r := c.do(t, "GET", "/things", ""); r.status != http.StatusUnauthorized {
		t.Errorf("GET /things without a token: %d, want 401", r.status)
	}
	c.idempotentReplay(t, bearer)
	c.inFlightLimit(t, bearer)
	// docker compose port extauthz 9090: /metrics, /healthz, /readyz
	port := c.must("docker", "compose", "port", "extauthz", "9090")
	_, p, _ := net.SplitHostPort(port)
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if err := getOK("http://127.0.0.1:" + p + path); err != nil {
			t.Errorf("docker compose port extauthz 9090 (%s): %v", port, err)
		}
	}
	c.scaled(t, bearer)

	c.must("docker", "compose", "down", "-v")
	if left := c.leftovers(); left != "" {
		t.Errorf("docker compose down -v left %s", left)
	}
}

// idempotentReplay: the walkthrough's POST twice with one Idempotency-Key,
// and the upstream's count.
func (c *compose) idempotentReplay(t *testing.T, bearer string) {
	t.Helper()
	post := func() reply {
		return c.do(t, "POST", "/orders", `{"amount":1}`, "authorization", bearer,
			"idempotency-key", "k1", "x-upstream-status", "201")
	}
	first, again := post(), post()
	if first.status != http.StatusCreated {
		t.Errorf("POST /orders: %d, want 201", first.status)
	}
	if again.status != first.status || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("POST /orders again: %d %q (Idempotent-Replayed %q); want %d %q replayed",
			again.status, again.body, again.header.Get("Idempotent-Replayed"), first.status, first.body)
	}
	// curl 'localhost:8080/_executions?tenant=acme&key=k1': {"executions":1}
	if body := c.get(t, c.upstream+"/_executions?tenant=acme&key=k1"); body != `{"executions":1}` {
		t.Errorf("_executions: %s, want {\"executions\":1}", body)
	}
}

// inFlightLimit: of 11 slow requests at once on /inflight, one gets 429;
// then the upstream reports {"max":10,"running":0}.
func (c *compose) inFlightLimit(t *testing.T, bearer string) {
	t.Helper()
	var wg sync.WaitGroup
	codes := make(chan int, 11)
	for range 11 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- c.do(t, "GET", "/inflight/report", "", "authorization", bearer, "x-upstream-delay", "2s").status
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for code := range codes {
		count[code]++
	}
	if count[http.StatusTooManyRequests] != 1 || count[http.StatusOK] != 10 {
		t.Errorf("11 slow requests on /inflight: %v, want ten 200 and one 429", count)
	}
	if body := c.get(t, c.upstream+"/_concurrency?tenant=acme"); body != `{"max":10,"running":0}` {
		t.Errorf("_concurrency: %s, want {\"max\":10,\"running\":0}", body)
	}
}

// scaled: docker compose up --build --scale extauthz=3 runs three replicas
// and requests still pass.
func (c *compose) scaled(t *testing.T, bearer string) {
	t.Helper()
	c.must("docker", "compose", "up", "--build", "--detach", "--wait", "--scale", "extauthz=3")
	ids := strings.Fields(c.must("docker", "compose", "ps", "-q", "extauthz"))
	if len(ids) != 3 {
		t.Errorf("--scale extauthz=3: %d extauthz containers, want 3", len(ids))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.do(t, "GET", "/things", "", "authorization", bearer)
		if r.status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("GET /things with three replicas: %d, want 200", r.status)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type reply struct {
	status int
	header http.Header
	body   string
}

var client = &http.Client{Timeout: 30 * time.Second}

// do sends one request to Envoy with headers given as name, value pairs.
func (c *compose) do(t *testing.T, method, path, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, c.envoy+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return reply{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func (c *compose) get(t *testing.T, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestComposeStopGrace checks that docker compose gives extauthz a stop
// grace above its drain (EXTAUTHZ_DRAIN_DELAY + EXTAUTHZ_SHUTDOWN_TIMEOUT,
// 10 s + 10 s by default): with Docker's default of 10 s, `docker compose
// stop` or `down` kills it mid-drain (TestImageStopDrains shows the kill).
func TestComposeStopGrace(t *testing.T) {
	t.Parallel()
	needImage(t)
	cmd := exec.Command("docker", "compose", "-f", "docker-compose.yaml", "config", "--format", "json")
	cmd.Dir = image.root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker compose config: %v", err)
	}
	var cfg struct {
		Services map[string]struct {
			StopGracePeriod string `json:"stop_grace_period"`
		} `json:"services"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(cfg.Services["extauthz"].StopGracePeriod)
	if err != nil || grace <= 20*time.Second {
		t.Errorf("extauthz stop_grace_period %q, want above 20s", cfg.Services["extauthz"].StopGracePeriod)
	}
}
