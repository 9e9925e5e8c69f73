package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// stackOpts chooses what a stack runs; the zero value is the default stack:
// envoy/front-proxy.yaml, two extauthz replicas on one Redis, the test policy.
type stackOpts struct {
	// config is a file in envoy/ (default front-proxy.yaml).
	config string
	// replicas is the number of extauthz processes (default 2).
	replicas int
	// env adds EXTAUTHZ_* variables to every replica.
	env []string
	// policy is the policy directory (default testdata/policy).
	policy string
	// edit, when set, rewrites the envoy/ file before it is rendered (a
	// test of one setting).
	edit func(src []byte) []byte
	// stripFilters runs Envoy with the router only (latency baseline),
	// and the HTTP filters named in keepFilters.
	stripFilters bool
	keepFilters  []string
	// noExtauthz starts Envoy without extauthz replicas: the cluster points
	// at closed ports (and Redis is not started).
	noExtauthz bool
	// eds serves the extauthz cluster's endpoints from a file (EDS) that
	// setEndpoints rewrites, instead of a static list.
	eds bool
	// otlp (host:port of an OTLP/gRPC receiver) turns Envoy's tracing on
	// (renderSpec.otlp); the replicas' EXTAUTHZ_OTLP_ENDPOINT is opts.env's.
	otlp string
	// keepJWKS leaves the configuration's JWT key sets as they are (opts.edit
	// made them local) instead of testIDP's.
	keepJWKS bool
	// admin serves each replica's admin API (EXTAUTHZ_ADMIN_ADDR, loopback,
	// no token) on a port of its own: replica.adminAddr.
	admin bool
	// shippedDeadlines keeps the deadlines as shipped (extauthz's Redis
	// calls 50 ms, Envoy's ratelimit filter 100 ms, ext_authz 250 ms): for
	// the tests whose subject is timing. Every other stack runs with
	// loadedRedisDeadline and loadedCallDeadline, which a loaded machine
	// (a shared CI runner, a laptop building) meets, so that a test of
	// what is decided never gets the failure mode's or Envoy's fail-open
	// answer instead of Redis's.
	shippedDeadlines bool
	// beforeReady, when set, runs after each replica's process started and
	// before the stack waits for its /readyz (a test of what keeps a
	// replica out of rotation, and of what brings it in).
	beforeReady func(r *replica)
}

// stack is one running Envoy + extauthz replicas + Redis + upstream.
type stack struct {
	t        testing.TB
	dir      string
	opts     stackOpts
	redis    *redistest.Server
	replicas []*replica
	// retired are replicas replaced by a rolling restart (for their logs).
	retired []*replica
	up      *upstream.Server
	upAddr  string
	envoy   *proc
	// url is the Envoy listener, e.g. http://127.0.0.1:34567.
	url string
	// admin is Envoy's admin address.
	admin string
	// edsPath is the extauthz cluster's EDS file (opts.eds).
	edsPath string
	// jwt: the stack's Envoy runs jwt_authn (front-proxy.yaml), so
	// requests that name a tenant carry a token (see req).
	jwt bool
}

// replica is one extauthz process.
type replica struct {
	*proc
	grpcAddr, httpAddr string
	replayAddr         string // EXTAUTHZ_REPLAY_ADDR (serves only with a bucket)
	adminAddr          string // EXTAUTHZ_ADMIN_ADDR with stackOpts.admin, else ""
}

// newStack starts a stack and stops it when the test ends; logs of every
// process are printed when the test failed.
func newStack(t testing.TB, opts stackOpts) *stack {
	t.Helper()
	needEnvoy(t)
	if !opts.noExtauthz {
		needExtauthz(t)
	}
	if opts.config == "" {
		opts.config = "front-proxy.yaml"
	}
	if opts.replicas == 0 {
		opts.replicas = 2
	}
	if opts.policy == "" {
		opts.policy = filepath.Join(deps.root, "test", "e2e", "testdata", "policy")
	}
	s := &stack{t: t, dir: t.TempDir(), opts: opts}
	t.Cleanup(s.printLogsOnFailure)
	s.startUpstream()
	grpcAddrs := s.startExtauthz()
	s.startEnvoy(grpcAddrs)
	return s
}

func (s *stack) startUpstream() {
	s.up = upstream.New()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.t.Fatalf("upstream: %v", err)
	}
	srv := &http.Server{Handler: s.up, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	s.t.Cleanup(func() { _ = srv.Close() })
	s.upAddr = l.Addr().String()
}

// startExtauthz starts Redis and the replicas; it returns the gRPC addresses
// for Envoy's extauthz cluster.
func (s *stack) startExtauthz() []string {
	if s.opts.noExtauthz {
		return []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))}
	}
	s.redis = redistest.Standalone(s.t)
	var addrs []string
	for i := 0; i < s.opts.replicas; i++ {
		r := s.startReplica(i, "")
		addrs = append(addrs, r.grpcAddr)
	}
	return addrs
}

// startReplica starts replica i on grpcAddr ("" picks a free port) and waits
// until its /readyz answers 200.
func (s *stack) startReplica(i int, grpcAddr string) *replica {
	s.t.Helper()
	if grpcAddr == "" {
		grpcAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))
	}
	r := &replica{grpcAddr: grpcAddr, httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))}
	if i < len(s.replicas) {
		r.replayAddr = s.replicas[i].replayAddr // Envoy's cluster names it
	} else {
		r.replayAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))
	}
	env := []string{
		"EXTAUTHZ_GRPC_ADDR=" + r.grpcAddr,
		"EXTAUTHZ_HTTP_ADDR=" + r.httpAddr,
		"EXTAUTHZ_REPLAY_ADDR=" + r.replayAddr,
		"EXTAUTHZ_CONFIG=" + s.opts.policy,
		"EXTAUTHZ_REDIS_URL=" + s.redis.URL,
		// The same on every replica: the policy's login route keys failed
		// logins by account, hashed under it.
		"EXTAUTHZ_CHARGE_KEY_SECRET=e2e-charge-key-secret-32-bytes-long!",
		"EXTAUTHZ_LOG_LEVEL=debug",
		"EXTAUTHZ_SHUTDOWN_TIMEOUT=2s",
		// Tests that do not restart replicas need no drain; the rolling
		// restart tests set the shipped default back (opts.env comes last).
		"EXTAUTHZ_DRAIN_DELAY=0s",
	}
	if !s.opts.shippedDeadlines {
		env = append(env, loadedDeadlines()...)
	}
	env = append(env, s.opts.env...)
	if s.opts.admin {
		r.adminAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))
		env = append(env, "EXTAUTHZ_ADMIN_ADDR="+r.adminAddr)
	}
	name := fmt.Sprintf("extauthz-%d", i)
	if i < len(s.replicas) {
		name = fmt.Sprintf("extauthz-%d-restart-%d", i, time.Now().UnixNano())
	}
	r.proc = startProc(s.t, s.dir, name, deps.extauthz, nil, env)
	s.t.Cleanup(func() { r.stop(5 * time.Second) })
	if s.opts.beforeReady != nil {
		s.opts.beforeReady(r)
	}
	if err := waitFor(r.proc, 15*time.Second, func() error { return httpOK("http://" + r.httpAddr + "/readyz") }); err != nil {
		s.t.Fatalf("%s: %v\n%s", name, err, r.tail(50))
	}
	if i < len(s.replicas) {
		s.replicas[i] = r
	} else {
		s.replicas = append(s.replicas, r)
	}
	return r
}

func (s *stack) startEnvoy(extauthzAddrs []string) {
	s.t.Helper()
	e := s.launchEnvoy("envoy", extauthzAddrs)
	s.envoy, s.url, s.admin, s.jwt = e.proc, e.url, e.admin, e.jwt
}

// envoyProc is one running Envoy.
type envoyProc struct {
	*proc
	// url is its listener, admin its admin address.
	url, admin string
	// jwt: it runs a jwt_authn filter.
	jwt bool
}

// launchEnvoy starts an Envoy running opts.config, named name (its files in
// the stack's directory start with name), on fresh ports.
func (s *stack) launchEnvoy(name string, extauthzAddrs []string) *envoyProc {
	s.t.Helper()
	src, err := os.ReadFile(filepath.Join(deps.root, "envoy", s.opts.config))
	if err != nil {
		s.t.Fatal(err)
	}
	if s.opts.edit != nil {
		src = s.opts.edit(src)
	}
	listener, admin := freePort(s.t), freePort(s.t)
	spec := renderSpec{
		adminPort:     admin,
		listenerPorts: map[string]int{listenerName(s.opts.config): listener},
		endpoints:     map[string][]string{"extauthz": extauthzAddrs, "upstream": {s.upAddr}},
		stripFilters:  s.opts.stripFilters,
		keepFilters:   s.opts.keepFilters,
		otlp:          s.opts.otlp,
		jwks:          testIDP.jwks,
		keepJWKS:      s.opts.keepJWKS,
	}
	if !s.opts.shippedDeadlines {
		spec.callDeadline = loadedCallDeadline
	}
	if hasReplayCluster(s.opts.config) {
		spec.endpoints["extauthz_replay"] = s.replayAddrs()
	}
	if hasIDPCluster(s.opts.config) {
		// Never called: the test JWKS replaces the remote one.
		spec.endpoints["idp"] = []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))}
	}
	if s.opts.eds {
		s.edsPath = filepath.Join(s.dir, "eds", "extauthz.yaml")
		if err := os.Mkdir(filepath.Dir(s.edsPath), 0o755); err != nil {
			s.t.Fatal(err)
		}
		s.setEndpoints(extauthzAddrs...)
		delete(spec.endpoints, "extauthz")
		spec.eds = map[string]string{"extauthz": s.edsPath}
	}
	cfg, err := renderEnvoy(src, spec)
	if err != nil {
		s.t.Fatal(err)
	}
	cfgPath := filepath.Join(s.dir, name+".yaml")
	// Readable by the Envoy image's user (101) under E2E_ENVOY=docker.
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		s.t.Fatal(err)
	}
	e := &envoyProc{url: fmt.Sprintf("http://127.0.0.1:%d", listener), admin: fmt.Sprintf("http://127.0.0.1:%d", admin),
		jwt: strings.Contains(string(cfg), "envoy.filters.http.jwt_authn")}
	args := []string{
		"--disable-hot-restart", "--concurrency", "2", "--log-level", "info",
		"--drain-time-s", "1",
		// xDS (the EDS file of opts.eds) needs a node identity.
		"--service-node", "e2e", "--service-cluster", "e2e",
	}
	// identity is what this Envoy's /server_info names and no other's does.
	identity, serverLog := cfgPath, filepath.Join(s.dir, name+"-server.log")
	if dockerEnvoy() {
		identity = fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
		e.proc = s.startDockerEnvoy(name, cfgPath, append(args, "--service-zone", identity))
		serverLog = e.log
	} else {
		e.proc = startProc(s.t, s.dir, name, deps.envoy, append([]string{"-c", cfgPath, "--log-path", serverLog}, args...), nil)
	}
	s.t.Cleanup(func() { e.stop(5 * time.Second) })
	if err := waitFor(e.proc, 60*time.Second, func() error { return ownEnvoyReady(e.admin, identity) }); err != nil {
		s.t.Fatalf("%s: %v\n%s", name, err, tailFile(serverLog, 40))
	}
	return e
}

// setEndpoints replaces the extauthz cluster's endpoints (opts.eds) the
// way Envoy's file-based EDS wants it: a new file renamed over the old one
// in the watched directory.
func (s *stack) setEndpoints(addrs ...string) {
	s.t.Helper()
	b, err := edsFile("extauthz", addrs)
	if err != nil {
		s.t.Fatal(err)
	}
	tmp := s.edsPath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		s.t.Fatal(err)
	}
	if err := os.Rename(tmp, s.edsPath); err != nil {
		s.t.Fatal(err)
	}
}

// hasReplayCluster reports whether an envoy/ file has the extauthz_replay
// cluster (the idempotency configs do; the RLQS one does not).
func hasReplayCluster(config string) bool { return config != "rlqs.yaml" }

// hasIDPCluster reports whether an envoy/ file has the idp cluster (the
// remote JWKS of front-proxy.yaml's jwt_authn).
func hasIDPCluster(config string) bool { return config == "front-proxy.yaml" }

// listenerName is the name of the one listener of each envoy/ file.
func listenerName(config string) string {
	if config == "sidecar.yaml" {
		return "inbound"
	}
	return "ingress"
}

func (s *stack) printLogsOnFailure() {
	if !s.t.Failed() {
		return
	}
	if !dockerEnvoy() { // under E2E_ENVOY=docker the server log is the output below
		s.t.Logf("envoy server log:\n%s", tailFile(filepath.Join(s.dir, "envoy-server.log"), 80))
	}
	if s.envoy != nil {
		s.t.Logf("envoy access log:\n%s", s.envoy.tail(80))
	}
	for _, r := range append(s.retired, s.replicas...) {
		s.t.Logf("%s log:\n%s", r.name, r.tail(60))
	}
}

func tailFile(path string, n int) string {
	return (&proc{log: path}).tail(n)
}

var probeClient = &http.Client{Timeout: time.Second}

// ownEnvoyReady checks that the Envoy answering on admin is ready and is
// the one whose /server_info names identity (its -c path, or under
// E2E_ENVOY=docker its --service-zone): an Envoy that lost its ports to
// another test's exits, while the other would answer for it, and the test
// would read that one's stats.
func ownEnvoyReady(admin, identity string) error {
	if err := httpOK(admin + "/ready"); err != nil {
		return err
	}
	resp, err := probeClient.Get(admin + "/server_info")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if !strings.Contains(string(body), identity) {
		return fmt.Errorf("%s is another Envoy's admin (its server_info does not name %s)", admin, identity)
	}
	return nil
}

func httpOK(url string) error {
	resp, err := probeClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// replayAddrs are the replicas' replay endpoints, for Envoy's
// extauthz_replay cluster (a closed port when there are none).
func (s *stack) replayAddrs() []string {
	var out []string
	for _, r := range s.replicas {
		out = append(out, r.replayAddr)
	}
	if len(out) == 0 {
		out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t))))
	}
	return out
}
