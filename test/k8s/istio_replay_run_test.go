package k8s

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocfv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Header names of extauthz's replay hand-over (pkg/envoy/authz), and a
// test header that makes the fake ext_authz mark a request for replay.
const (
	ticketHeader = "x-extauthz-replay"
	scopeHeader  = "x-extauthz-replay-scope"
	markHeader   = "x-test-mark-replay"
)

// TestSidecarRoutesReplayTickets runs a real Envoy with the inbound chain
// rendered from k8s/istio (as TestEnvoyAcceptsSidecarConfig builds it),
// with fakes for extauthz's gRPC services, the workload and the replay
// endpoint, and checks what the manifests promise: a request ext_authz
// marks with a ticket lands on the replay endpoint with the ticket and the
// scope proof, never on the workload, and skips ext_proc; client copies of
// both headers are gone before ext_authz, routing and the workload see
// them.
func TestSidecarRoutesReplayTickets(t *testing.T) {
	t.Parallel()
	bin := envoyBin(t)
	fake := &fakeExtauthz{}
	grpcLn := listen(t)
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, fake)
	extprocv3.RegisterExternalProcessorServer(g, fake)
	rlsv3.RegisterRateLimitServiceServer(g, fake)
	go func() { _ = g.Serve(grpcLn) }()
	t.Cleanup(g.Stop)
	app, replay := serveHTTPRecorder(t, 200, "app"), serveHTTPRecorder(t, 201, "replayed")

	sc := renderSidecar(t, serviceTarget(t), "app")
	loosenTimeouts(t, sc)
	listenAddr := freeAddr(t)
	ports := sidecarPorts{listen: port(t, listenAddr), extauthz: port(t, grpcLn.Addr().String()), app: app.port, replay: replay.port}
	runEnvoy(t, bin, sc, ports)
	url := "http://" + listenAddr + "/orders/1"

	// A client's copies are stripped: the request runs on the workload.
	status, body := get(t, url, ticketHeader, "forged", scopeHeader, "forged")
	if status != 200 || body != "app" || app.count() != 1 || replay.count() != 0 {
		t.Fatalf("forged ticket: %d %q (app %d, replay %d calls), want 200 from the app", status, body, app.count(), replay.count())
	}
	if h := app.last(); h.Get(ticketHeader) != "" || h.Get(scopeHeader) != "" {
		t.Errorf("the workload received %s=%q %s=%q", ticketHeader, h.Get(ticketHeader), scopeHeader, h.Get(scopeHeader))
	}
	if seen := fake.seenHeaders(); seen[ticketHeader] != "" || seen[scopeHeader] != "" {
		t.Errorf("ext_authz saw the client's replay headers %v", seen)
	}
	streams := fake.streams.Load()

	// ext_authz marks the request: it goes to the replay endpoint instead.
	status, body = get(t, url, markHeader, "1")
	if status != 201 || body != "replayed" || app.count() != 1 || replay.count() != 1 {
		t.Fatalf("marked request: %d %q (app %d, replay %d calls), want 201 from the replay endpoint", status, body, app.count(), replay.count())
	}
	if h := replay.last(); h.Get(ticketHeader) != "T" || h.Get(scopeHeader) != "S" {
		t.Errorf("the replay endpoint received %s=%q %s=%q, want T and S", ticketHeader, h.Get(ticketHeader), scopeHeader, h.Get(scopeHeader))
	}
	if n := fake.streams.Load(); n != streams {
		t.Errorf("ext_proc saw the replay (%d streams, had %d): it is disabled on the replay route", n, streams)
	}
}

// fakeExtauthz admits everything: ext_authz marks requests carrying
// markHeader for replay, ext_proc continues every phase, RLS says OK.
type fakeExtauthz struct {
	authv3.UnimplementedAuthorizationServer
	extprocv3.UnimplementedExternalProcessorServer
	rlsv3.UnimplementedRateLimitServiceServer
	mu      sync.Mutex
	seen    map[string]string // the last Check's request headers
	streams atomic.Int32
}

func (f *fakeExtauthz) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	hs := req.GetAttributes().GetRequest().GetHttp().GetHeaders()
	f.mu.Lock()
	f.seen = hs
	f.mu.Unlock()
	ok := &authv3.OkHttpResponse{}
	if hs[markHeader] != "" {
		for name, v := range map[string]string{ticketHeader: "T", scopeHeader: "S"} {
			ok.Headers = append(ok.Headers, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: name, Value: v},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
		}
	}
	return &authv3.CheckResponse{Status: &rpcstatus.Status{}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: ok}}, nil
}

func (f *fakeExtauthz) seenHeaders() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

func (f *fakeExtauthz) Process(s extprocv3.ExternalProcessor_ProcessServer) error {
	f.streams.Add(1)
	for {
		req, err := s.Recv()
		if err != nil {
			return nil
		}
		resp := &extprocv3.ProcessingResponse{}
		switch req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp.Response = &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_RequestBody:
			resp.Response = &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{}}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp.Response = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}
		default:
			return errors.New("unexpected ext_proc phase")
		}
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

func (f *fakeExtauthz) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// httpRecorder is an HTTP server answering status and body, recording the
// requests' headers.
type httpRecorder struct {
	port    int
	mu      sync.Mutex
	headers []http.Header
}

func serveHTTPRecorder(t *testing.T, status int, body string) *httpRecorder {
	t.Helper()
	ln := listen(t)
	r := &httpRecorder{port: port(t, ln.Addr().String())}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *httpRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.headers)
}

func (r *httpRecorder) last() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.headers[len(r.headers)-1]
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("address %q: %v %v", addr, err, err2)
	}
	return n
}

// loosenTimeouts gives ext_authz and ext_proc 5s: the test checks routing,
// not latency, on a machine that may be busy.
func loosenTimeouts(t *testing.T, sc *sidecar) {
	t.Helper()
	for _, f := range sc.hcm.GetHttpFilters() {
		cfg, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		switch c := cfg.(type) {
		case *extauthzv3.ExtAuthz:
			c.GetGrpcService().Timeout = durationpb.New(5 * time.Second)
		case *extprocfv3.ExternalProcessor:
			c.MessageTimeout = durationpb.New(5 * time.Second)
		default:
			continue
		}
		f.GetTypedConfig().Value, err = proto.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// runEnvoy starts Envoy on the sidecar's config and waits for its listener.
func runEnvoy(t *testing.T, bin string, sc *sidecar, p sidecarPorts) {
	t.Helper()
	j, err := protojson.Marshal(sc.bootstrap(t, p))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "envoy.json")
	if err := os.WriteFile(path, j, 0o644); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(bin, "-c", path, "--disable-hot-restart", "--log-level", "warn", "--concurrency", "1")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("envoy output:\n%s", out.String())
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(p.listen)
	waitFor(t, 30*time.Second, "envoy's listener", func(int) bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// get sends a GET with header pairs and returns the status and body.
func get(t *testing.T, url string, kv ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Set(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}
