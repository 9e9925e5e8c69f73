package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/test/e2e/upstream"
)

const (
	// Envoy Gateway's fixed ports on the host: its xDS server for Envoy,
	// its rate-limit xDS server (internal/infrastructure/kubernetes/
	// ratelimit: XdsGrpcSotwConfigServerPort) and its Wasm HTTP server
	// (besides :8081, the File provider's health probe, whose failure it
	// only logs). None can be moved, so one run of this test at a time per
	// machine (make test runs this package alone).
	egXDSPort          = 18000
	egRatelimitXDSPort = 18001
	egWasmPort         = 18002
	// rlNode is the node id Envoy Gateway keys its RateLimitConfig snapshot
	// by (ratelimit.InfraName), and its deployment sets as
	// CONFIG_GRPC_XDS_NODE_ID.
	rlNode = "envoy-ratelimit"
	// egDomain is the domain Envoy Gateway names for the Gateway's
	// listener: namespace/gateway/listener.
	egDomain      = "default/eg/http"
	userHeader    = "x-user-id"
	costNamespace = "io.extauthz.cost"
	costKey       = "tokens"
	// requestCostKey holds the request's cost, 0 (see gatewayYAML).
	requestCostKey = "request"
	// egServerName is the controller's name the rate limit deployment dials
	// (envoy-gateway.envoy-gateway-system.svc.cluster.local:18001) and its
	// certificate carries: certgen --local issues the Kubernetes names.
	egServerName = "envoy-gateway.envoy-gateway-system.svc.cluster.local"
	// rlServerName is a name the rate limit service's certificate carries
	// (certgen: *.envoy-gateway-system).
	rlServerName = "envoy-ratelimit.envoy-gateway-system"
	// budget is the chat route's token budget per user and hour.
	budget = 10
)

// setup is one running stack: Envoy Gateway's controller (and the Envoy it
// started), extauthz as its rate limit service, Redis, the upstream.
type setup struct {
	dir, resources string
	gatewayURL     string
	eg, rl         *proc
	promAddr       string
	rlGRPCAddr     string
	certs          string // certgen --local's certs/ directory
}

// TestEnvoyGatewayStandaloneDrivesExtauthz runs Envoy Gateway v1.9.1's own
// controller in its standalone mode (File provider, Host infrastructure)
// on Gateway API resources with a per-user global limit and a token budget
// charged from a response cost in dynamic metadata. Its translator makes
// the Envoy config (served to the Envoy its Host infrastructure starts)
// and the RateLimitConfig (served on its rate-limit xDS server, over mutual
// TLS with certgen's certificates, to extauthz started as its rate limit
// deployment starts envoyproxy/ratelimit). Through that Envoy:
//   - the RateLimitConfig it serves has the listener's domain, a per-user
//     3/minute descriptor and a per-user 10/hour one;
//   - the per-user limit: 3 requests of a user pass, the 4th is 429, and
//     another user passes;
//   - the token budget trips: a reply reporting 10,000 tokens (copied into
//     dynamic metadata by a Lua EnvoyExtensionPolicy) is charged at stream
//     end past the limit, and the user's next request is 429; a small reply
//     leaves another user under the budget;
//   - a policy change (the BackendTrafficPolicy's file edited to 5/minute)
//     reaches extauthz over xDS, with neither process restarted;
//   - mutual TLS between all three as Envoy Gateway sets it up: Envoy's
//     rate limit and xDS clusters complete TLS handshakes, extauthz and the
//     controller both refuse a client without a certificate.
func TestEnvoyGatewayStandaloneDrivesExtauthz(t *testing.T) {
	need(t, "envoy", deps.envoyErr)
	need(t, "envoy-gateway", deps.envoyGatewayErr)
	need(t, "extauthz", deps.extauthzErr)
	s := start(t)

	t.Run("RateLimitConfig", func(t *testing.T) { s.checkRateLimitConfig(t) })
	t.Run("PerUserLimit", func(t *testing.T) {
		clearOfWindowEdge(time.Minute, 20*time.Second)
		s.expectLimit(t, "/users", uniq("alice"), 3)
		if code := s.get(t, "/users", uniq("bob"), ""); code != http.StatusOK {
			t.Errorf("another user after alice's 4th: %d, want 200 (the limit is per x-user-id)", code)
		}
	})
	t.Run("TokenBudgetTrips", func(t *testing.T) { s.checkTokenBudget(t) })
	t.Run("PolicyChangeOverXDS", func(t *testing.T) { s.checkPolicyChange(t) })
	t.Run("MutualTLS", func(t *testing.T) { s.checkMutualTLS(t) })
}

// start brings the stack up and waits until a request through Envoy is
// limited by extauthz.
func start(t *testing.T) *setup {
	for _, port := range []int{egXDSPort, egRatelimitXDSPort, egWasmPort} {
		l, err := net.Listen("tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d, which Envoy Gateway's controller always listens on, is taken: %v", port, err)
		}
		l.Close()
	}
	dir := t.TempDir()
	s := &setup{dir: dir, resources: filepath.Join(dir, "resources")}
	home := map[string]string{}
	for _, d := range []string{"config", "data", "state", "run", "resources"} {
		home[d] = filepath.Join(dir, d)
		if err := os.MkdirAll(home[d], 0o750); err != nil {
			t.Fatal(err)
		}
	}

	// The control plane's PKI, as the standalone docs make it: one CA,
	// certificates for the controller, Envoy and the rate limit service.
	certgen := startProc(t, dir, "certgen", deps.envoyGateway, []string{"certgen", "--local", "--config-home", home["config"]}, nil)
	<-certgen.done
	if certgen.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("envoy-gateway certgen --local: %s", certgen.tail(20))
	}
	s.certs = filepath.Join(home["config"], "certs")

	// func-e runs Envoy from DATA_HOME/envoy-versions/VERSION/bin/envoy and
	// downloads it only when that is missing: ours goes there.
	version, err := envoyVersion(deps.envoy)
	if err != nil {
		t.Fatal(err)
	}
	envoyDir := filepath.Join(home["data"], "envoy-versions", version, "bin")
	if err := os.MkdirAll(envoyDir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(deps.envoy, filepath.Join(envoyDir, "envoy")); err != nil {
		t.Fatal(err)
	}

	redis := redistest.Standalone(t)
	// Envoy Gateway's validation parses the URL with net/url, which refuses
	// "127.0.0.1:port" ("first path segment in URL cannot contain colon")
	// and takes "host:port" with a host name; so does the deployment's
	// REDIS_URL.
	redisURL := "localhost:" + redis.Addr[strings.LastIndex(redis.Addr, ":")+1:]
	up := httptest.NewServer(upstream.New())
	t.Cleanup(up.Close)
	upPort := up.Listener.Addr().(*net.TCPAddr).Port

	s.rl = s.startRatelimit(t, redisURL)

	gatewayPort := freePort(t)
	s.gatewayURL = "http://127.0.0.1:" + strconv.Itoa(gatewayPort)
	rlPort := s.rlGRPCAddr[strings.LastIndex(s.rlGRPCAddr, ":")+1:]
	render(t, s.resources, "controlplane.yaml", controlPlaneYAML, map[string]any{
		"EnvoyCert":     b64File(t, filepath.Join(s.certs, "envoy", "tls.crt")),
		"EnvoyKey":      b64File(t, filepath.Join(s.certs, "envoy", "tls.key")),
		"EnvoyCA":       filepath.Join(s.certs, "envoy", "ca.crt"),
		"RatelimitPort": rlPort,
	})
	render(t, s.resources, "gateway.yaml", gatewayYAML, map[string]any{
		"EnvoyVersion": version, "GatewayPort": gatewayPort, "UpstreamPort": upPort,
		"CostNamespace": costNamespace, "CostKey": costKey, "RequestKey": requestCostKey, "Budget": budget,
	})
	render(t, s.resources, "users-limit.yaml", usersLimitYAML, map[string]any{"PerMinute": 3})
	cfg := render(t, dir, "envoy-gateway.yaml", egConfig, map[string]any{
		"Resources": s.resources, "ConfigHome": home["config"], "DataHome": home["data"],
		"StateHome": home["state"], "RuntimeDir": home["run"], "RedisAddr": redisURL, "AdminPort": freePort(t),
	})
	s.eg = startProc(t, dir, "envoy-gateway", deps.envoyGateway, []string{"server", "--config-path", cfg}, nil)

	// Ready when extauthz holds Envoy Gateway's limits and Envoy routes
	// through them: a throwaway user's 4th request is refused.
	waitUntil(t, "a request through Envoy to be limited by extauthz", 3*time.Minute, func() bool {
		user := uniq("warmup")
		for range 3 {
			if s.getQuiet("/users", user) != http.StatusOK {
				return false
			}
		}
		return s.getQuiet("/users", user) == http.StatusTooManyRequests
	}, s.eg, s.rl)
	return s
}

// startRatelimit starts extauthz by the name ratelimit with the
// environment Envoy Gateway's rate limit deployment gives
// envoyproxy/ratelimit (internal/infrastructure/kubernetes/ratelimit/
// resource.go), its /certs being certgen's envoy-rate-limit directory, the
// controller reached on localhost and verified by its Service's name.
func (s *setup) startRatelimit(t *testing.T, redisAddr string) *proc {
	t.Helper()
	certs := filepath.Join(s.certs, "envoy-rate-limit")
	cert, key, ca := filepath.Join(certs, "tls.crt"), filepath.Join(certs, "tls.key"), filepath.Join(certs, "ca.crt")
	bin := filepath.Join(s.dir, "bin", "ratelimit")
	if err := os.MkdirAll(filepath.Dir(bin), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(deps.extauthz, bin); err != nil {
		t.Fatal(err)
	}
	grpcPort, httpPort := freePort(t), freePort(t)
	s.rlGRPCAddr = "127.0.0.1:" + strconv.Itoa(grpcPort)
	s.promAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	env := []string{
		"RUNTIME_ROOT=" + filepath.Join(s.dir, "data"),
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_IGNOREDOTFILES=true",
		"RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info",
		"USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW",
		"CONFIG_GRPC_XDS_SERVER_URL=localhost:" + strconv.Itoa(egRatelimitXDSPort),
		"CONFIG_GRPC_XDS_NODE_ID=" + rlNode,
		"GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + cert,
		"GRPC_SERVER_TLS_KEY=" + key,
		"GRPC_SERVER_TLS_CA_CERT=" + ca,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true",
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + cert,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + key,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + ca,
		// Dialled as localhost here: the name to verify is the Service's.
		"CONFIG_GRPC_XDS_SERVER_TLS_SAN=" + egServerName,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + redisAddr,
		"USE_PROMETHEUS=true",
		"PROMETHEUS_ADDR=" + s.promAddr,
		// Ports: the deployment's 8081 and 8080, free ones here.
		"GRPC_PORT=" + strconv.Itoa(grpcPort),
		"PORT=" + strconv.Itoa(httpPort),
	}
	p := startProc(t, s.dir, "ratelimit", bin, nil, env)
	waitUntil(t, "extauthz's /healthcheck", time.Minute, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(httpPort) + "/healthcheck")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, p)
	return p
}

// checkRateLimitConfig fetches what the controller serves extauthz, as
// extauthz does (node envoy-ratelimit, mutual TLS with the rate limit
// service's certificate), and checks its shape.
func (s *setup) checkRateLimitConfig(t *testing.T) {
	cfgs := s.fetchRateLimitConfigs(t, s.rlClientTLS(t))
	var dump []string
	var found *rlsconfv3.RateLimitConfig
	for _, c := range cfgs {
		b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(c)
		dump = append(dump, string(b))
		if c.GetDomain() == egDomain {
			found = c
		}
	}
	t.Logf("RateLimitConfig served on :%d for node %s:\n%s", egRatelimitXDSPort, rlNode, strings.Join(dump, "\n"))
	if dir := os.Getenv("EG_DUMP_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "ratelimitconfig.json"), []byte(strings.Join(dump, "\n")), 0o644)
	}
	if found == nil {
		t.Fatalf("no RateLimitConfig for domain %q among %d", egDomain, len(cfgs))
	}
	limits := map[string]bool{}
	var walk func([]*rlsconfv3.RateLimitDescriptor)
	walk = func(ds []*rlsconfv3.RateLimitDescriptor) {
		for _, d := range ds {
			if rl := d.GetRateLimit(); rl != nil {
				limits[fmt.Sprintf("%s:%d/%s", d.GetKey(), rl.GetRequestsPerUnit(), rl.GetUnit())] = true
			}
			walk(d.GetDescriptors())
		}
	}
	walk(found.GetDescriptors())
	var perUser, perHour bool
	for l := range limits {
		perUser = perUser || strings.HasSuffix(l, ":3/MINUTE")
		perHour = perHour || strings.HasSuffix(l, ":"+strconv.Itoa(budget)+"/HOUR")
	}
	if !perUser || !perHour {
		t.Errorf("limits in domain %s: %v, want a 3/MINUTE and a %d/HOUR descriptor", egDomain, limits, budget)
	}
}

// checkTokenBudget: a reply of 10,000 tokens against 10 an hour is charged
// past the limit at stream end, and the next request is 429. Counted as
// the peer counts: the request itself is a check (cost 0), so five
// replies of 2 tokens fill the budget exactly, a sixth request still
// passes (10 of 10 is not above the limit), and after its reply the next
// is refused.
func (s *setup) checkTokenBudget(t *testing.T) {
	clearOfWindowEdge(time.Hour, 30*time.Second)
	big, small := uniq("big-spender"), uniq("small-spender")

	s.chat(t, big, "10000", http.StatusOK, "first request")
	s.chat(t, big, "", http.StatusTooManyRequests, "after a reply of 10,000 tokens against 10/hour (the charge past the limit must land)")

	for i := range 5 {
		s.chat(t, small, "2", http.StatusOK, fmt.Sprintf("request %d, with %d of 10 tokens spent (requests must cost 0)", i+1, 2*i))
	}
	s.chat(t, small, "1", http.StatusOK, "with 10 of 10 spent (a check at the limit passes)")
	s.chat(t, small, "", http.StatusTooManyRequests, "with 11 of 10 spent")
}

// chat sends one request of user to the chat route, the upstream's reply
// reporting usage tokens, expects want, and waits until extauthz has
// answered the request's calls: the check, and for a 200 the stream-done
// charge (fire-and-forget, after the reply).
func (s *setup) chat(t *testing.T, user, usage string, want int, what string) {
	t.Helper()
	calls := s.rlsCalls(t)
	if code := s.get(t, "/chat", user, usage); code != want {
		t.Fatalf("chat %s: %d, want %d", what, code, want)
	}
	n := 1.0
	if want == http.StatusOK {
		n = 2
	}
	waitUntil(t, "extauthz to answer the request's rate limit calls", 30*time.Second, func() bool { return s.rlsCalls(t) >= calls+n }, s.rl)
}

// checkPolicyChange edits the per-user policy's file to 5 a minute: the
// controller retranslates, serves a new RateLimitConfig, and extauthz
// applies it without a restart of either.
func (s *setup) checkPolicyChange(t *testing.T) {
	applied := s.metric(t, `extauthz_policy_xds_updates_total{result="applied"}`)
	egPID, rlPID := s.eg.cmd.Process.Pid, s.rl.cmd.Process.Pid
	render(t, s.resources, "users-limit.yaml", usersLimitYAML, map[string]any{"PerMinute": 5})
	// The controller reloads the whole directory on a change, and may
	// publish snapshots on the way (under load a reload takes seconds), so
	// the change is awaited in two steps: the controller serves the new
	// limit, then a probe user gets exactly it through Envoy.
	waitUntil(t, "the controller to serve 5/MINUTE", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfgs, err := s.fetchRateLimitConfigsErr(ctx, s.rlClientTLS(t))
		return err == nil && hasLimit(cfgs, "5/MINUTE")
	}, s.eg, s.rl)
	waitUntil(t, "5 a minute to hold through Envoy", time.Minute, func() bool {
		clearOfWindowEdge(time.Minute, 5*time.Second)
		user := uniq("probe")
		for range 5 {
			if s.getQuiet("/users", user) != http.StatusOK {
				return false
			}
		}
		return s.getQuiet("/users", user) == http.StatusTooManyRequests
	}, s.eg, s.rl)
	if now := s.metric(t, `extauthz_policy_xds_updates_total{result="applied"}`); now <= applied {
		t.Errorf("extauthz applied %v RateLimitConfig updates, %v before the edit: the change must come over xDS", now, applied)
	}
	// Envoy's route config carries no limit values; only extauthz's policy
	// changed. Another fresh user gets exactly 5 too: it holds.
	clearOfWindowEdge(time.Minute, 20*time.Second)
	s.expectLimit(t, "/users", uniq("carol"), 5)
	if s.eg.exited() || s.rl.exited() || s.eg.cmd.Process.Pid != egPID || s.rl.cmd.Process.Pid != rlPID {
		t.Error("a process was restarted; the change must arrive over xDS")
	}
	if n := s.metric(t, `extauthz_policy_xds_updates_total{result="rejected"}`); n != 0 {
		t.Errorf("extauthz rejected %v of Envoy Gateway's RateLimitConfig updates, want none", n)
	}
}

// checkMutualTLS: every link is mutual TLS with certgen's CA.
func (s *setup) checkMutualTLS(t *testing.T) {
	admin := s.envoyAdmin(t)
	stats := httpGet(t, admin+"/stats?filter=^cluster\\.(ratelimit_cluster|xds_cluster)\\.ssl\\.handshake$")
	for _, c := range []string{"ratelimit_cluster", "xds_cluster"} {
		m := regexp.MustCompile(`cluster\.` + c + `\.ssl\.handshake: (\d+)`).FindStringSubmatch(stats)
		if m == nil || m[1] == "0" {
			t.Errorf("Envoy's %s: no TLS handshake (stats: %q)", c, stats)
		}
	}
	if dir := os.Getenv("EG_DUMP_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "envoy-config-dump.json"), []byte(httpGet(t, admin+"/config_dump")), 0o644)
	}

	pool := s.caPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	envoyCert, err := tls.LoadX509KeyPair(filepath.Join(s.certs, "envoy", "tls.crt"), filepath.Join(s.certs, "envoy", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	// Envoy's certificate gets a decision; no certificate gets none.
	for _, certs := range [][]tls.Certificate{{envoyCert}, nil} {
		creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: rlServerName, Certificates: certs})
		conn, err := grpc.NewClient(s.rlGRPCAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: egDomain})
		conn.Close()
		switch {
		case certs != nil && err != nil:
			t.Errorf("extauthz refused Envoy's certificate: %v", err)
		case certs == nil && err == nil:
			t.Error("extauthz decided for a client without a certificate; Envoy Gateway's setup is mutual TLS")
		}
	}
	noCert := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: egServerName})
	if _, err := s.fetchRateLimitConfigsErr(ctx, noCert); err == nil {
		t.Error("the controller's rate-limit xDS server served a client without a certificate")
	}
}

// hasLimit reports whether any descriptor of cfgs has the limit N/UNIT.
func hasLimit(cfgs []*rlsconfv3.RateLimitConfig, limit string) bool {
	var walk func([]*rlsconfv3.RateLimitDescriptor) bool
	walk = func(ds []*rlsconfv3.RateLimitDescriptor) bool {
		for _, d := range ds {
			if rl := d.GetRateLimit(); rl != nil && fmt.Sprintf("%d/%s", rl.GetRequestsPerUnit(), rl.GetUnit()) == limit {
				return true
			}
			if walk(d.GetDescriptors()) {
				return true
			}
		}
		return false
	}
	for _, c := range cfgs {
		if walk(c.GetDescriptors()) {
			return true
		}
	}
	return false
}

// expectLimit sends limit requests of user to path (each 200) and one more
// (429).
func (s *setup) expectLimit(t *testing.T, path, user string, limit int) {
	t.Helper()
	for i := range limit {
		if code := s.get(t, path, user, ""); code != http.StatusOK {
			t.Fatalf("%s request %d of %d for %s: %d, want 200", path, i+1, limit, user, code)
		}
	}
	if code := s.get(t, path, user, ""); code != http.StatusTooManyRequests {
		t.Errorf("%s request %d for %s against %d/minute: %d, want 429", path, limit+1, user, limit, code)
	}
}

// get sends GET path through Envoy as user; usage, when set, is the
// tokens the upstream's reply reports (X-Usage-Tokens).
func (s *setup) get(t *testing.T, path, user, usage string) int {
	t.Helper()
	code, err := s.do(path, user, usage)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return code
}

func (s *setup) getQuiet(path, user string) int {
	code, _ := s.do(path, user, "")
	return code
}

func (s *setup) do(path, user, usage string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, s.gatewayURL+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(userHeader, user)
	if usage != "" {
		req.Header.Set(upstream.HeaderUsage, usage)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// rlsCalls sums extauthz's RLS decisions (one per descriptor answered).
func (s *setup) rlsCalls(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(httpGet(t, "http://"+s.promAddr+"/metrics"), "\n") {
		if strings.HasPrefix(line, "extauthz_decisions_total{") && strings.Contains(line, `api="ratelimit"`) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// metric reads one series of extauthz's /metrics (0 when absent).
func (s *setup) metric(t *testing.T, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(httpGet(t, "http://"+s.promAddr+"/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// envoyAdmin finds the admin address of the Envoy the Host infrastructure
// started (port 0 in its bootstrap; func-e writes the address it got).
func (s *setup) envoyAdmin(t *testing.T) string {
	t.Helper()
	var addr string
	waitUntil(t, "Envoy's admin address file", 30*time.Second, func() bool {
		_ = filepath.WalkDir(s.dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == "admin-address.txt" {
				if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
					addr = strings.TrimSpace(string(b))
				}
			}
			return nil
		})
		return addr != ""
	})
	return "http://" + addr
}

func (s *setup) caPool(t *testing.T) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(s.certs, "envoy-rate-limit", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("certgen's ca.crt holds no certificate")
	}
	return pool
}

// rlClientTLS is the rate limit service's client side: its certificate,
// certgen's CA, the controller's Service name.
func (s *setup) rlClientTLS(t *testing.T) credentials.TransportCredentials {
	t.Helper()
	dir := filepath.Join(s.certs, "envoy-rate-limit")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.caPool(t), Certificates: []tls.Certificate{cert}, ServerName: egServerName})
}

func (s *setup) fetchRateLimitConfigs(t *testing.T, creds credentials.TransportCredentials) []*rlsconfv3.RateLimitConfig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfgs, err := s.fetchRateLimitConfigsErr(ctx, creds)
	if err != nil {
		t.Fatalf("fetch RateLimitConfig from the controller: %v", err)
	}
	return cfgs
}

// fetchRateLimitConfigsErr asks the controller's rate-limit xDS server for
// the RateLimitConfig resources of node envoy-ratelimit (one response).
func (s *setup) fetchRateLimitConfigsErr(ctx context.Context, creds credentials.TransportCredentials) ([]*rlsconfv3.RateLimitConfig, error) {
	conn, err := grpc.NewClient("localhost:"+strconv.Itoa(egRatelimitXDSPort), grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	const typeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: rlNode}, TypeUrl: typeURL}); err != nil {
		return nil, err
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var out []*rlsconfv3.RateLimitConfig
	for _, r := range resp.GetResources() {
		c := &rlsconfv3.RateLimitConfig{}
		if err := r.UnmarshalTo(c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

var uniqN int

// uniq is a user id no earlier run or step shares.
func uniq(name string) string {
	uniqN++
	return fmt.Sprintf("%s-%d-%d", name, time.Now().UnixNano(), uniqN)
}

// clearOfWindowEdge waits, when the next edge of window (aligned to the
// epoch, as the peer's fixed windows are) is closer than margin, until it
// has passed.
func clearOfWindowEdge(window, margin time.Duration) {
	now := time.Now()
	if left := now.Truncate(window).Add(window).Sub(now); left < margin {
		time.Sleep(left + 100*time.Millisecond)
	}
}
