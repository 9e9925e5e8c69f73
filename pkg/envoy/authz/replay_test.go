package authz

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/internal/testclock"
	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
	"github.com/extauthz/extauthz/pkg/idempotency/blob/blobtest"
	inflightmem "github.com/extauthz/extauthz/pkg/ratelimit/inflight/memstore"
)

// replayEnv is idemEnv with a replayer, an in-memory blob store and the
// replay endpoint on a real loopback HTTP server.
type replayEnv struct {
	*idemEnv
	blobs    *blobtest.Store
	replayer *Replayer
	url      string
	tclock   *testclock.Clock
}

func startReplay(t *testing.T, withReplay bool) *replayEnv {
	t.Helper()
	return startReplayPolicy(t, idemPolicy, withReplay)
}

// startReplayPolicy is startReplay with the policy yaml.
func startReplayPolicy(t *testing.T, yaml string, withReplay bool) *replayEnv {
	t.Helper()
	tc := testclock.New(time.Now())
	r, err := NewReplayer([]byte(strings.Repeat("s", MinReplaySecret)), tc.Now)
	if err != nil {
		t.Fatal(err)
	}
	var opts []IdempotencyOption
	if withReplay {
		opts = append(opts, WithReplay(r))
	}
	e := &replayEnv{idemEnv: startIdemStore(t, yaml, nil, opts...), blobs: blobtest.New(), replayer: r, tclock: tc}
	h, err := NewReplayHandler(r, e.blobs, e.events)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e
}

// storeLarge completes a record for POST path with key whose body is in
// the blob store, as the streamed capture does for a large reply.
func (e *replayEnv) storeLarge(t *testing.T, path, key string, reqBody, body []byte) blob.Ref {
	t.Helper()
	return e.storeLargeFor(t, "acme", path, key, reqBody, body)
}

// storeLargeFor is storeLarge in another tenant's scope.
func (e *replayEnv) storeLargeFor(t *testing.T, scope, path, key string, reqBody, body []byte) blob.Ref {
	t.Helper()
	ctx := context.Background()
	w, _ := e.blobs.Create(ctx, "obj-"+scope+"-"+key, time.Hour)
	_, _ = w.Write(body)
	ref, err := w.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fp := idempotency.NewFingerprint("POST", path, reqBody, nil)
	o, err := e.store.Begin(ctx, scope, key, fp, idempotency.TTLs{Lease: 30 * time.Second, Record: time.Hour})
	if err != nil || o.Kind != idempotency.Acquired {
		t.Fatalf("Begin = %v, %v", o.Kind, err)
	}
	resp := idempotency.Response{Status: 201, BodyRef: &ref, Headers: []idempotency.Header{
		{Name: "content-type", Value: "application/octet-stream"}, {Name: "x-unlisted", Value: "no"}}}
	if err := e.store.Complete(ctx, o.Lease, resp); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return ref
}

// markOf returns the replay mark of an ext_authz answer, failing unless it
// admits the request with exactly the ticket and the scope proof.
func markOf(t *testing.T, resp *authv3.CheckResponse) replayMark {
	t.Helper()
	hs := resp.GetOkResponse().GetHeaders()
	if len(hs) != 2 || hs[0].GetHeader().GetKey() != HeaderReplayTicket || hs[1].GetHeader().GetKey() != HeaderReplayScope {
		t.Fatalf("Check = %v, want OK with %s and %s", resp, HeaderReplayTicket, HeaderReplayScope)
	}
	return replayMark{ticket: hs[0].GetHeader().GetValue(), scope: hs[1].GetHeader().GetValue()}
}

// fetch sends the request Envoy routes to the replay endpoint, with the
// mark's headers that are set.
func (e *replayEnv) fetch(t *testing.T, m replayMark, key string) (*http.Response, []byte, error) {
	t.Helper()
	return e.fetchWith(t, m, key)
}

// fetchWith is fetch with extra header fields (name, value pairs) added.
func (e *replayEnv) fetchWith(t *testing.T, m replayMark, key string, extra ...string) (*http.Response, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", e.url+"/orders/1", strings.NewReader("{}"))
	for _, h := range m.headers() {
		if h[1] != "" {
			req.Header.Set(h[0], h[1])
		}
	}
	for i := 0; i+1 < len(extra); i += 2 {
		req.Header.Add(extra[i], extra[i+1])
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// A completed record whose body is in object storage: ext_authz admits the
// retry with a signed ticket, and the endpoint streams the stored reply
// byte for byte with Idempotent-Replayed: true and only allow-listed
// headers.
func TestAuthzReplayFromObjectStorage(t *testing.T) {
	e := startReplay(t, true)
	body := make([]byte, 3<<20+5)
	_, _ = rand.Read(body)
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), body)

	resp := e.post(t, "/orders/1", "acme", "k1", []byte("{}"))
	mark := markOf(t, resp)
	if md := resp.GetDynamicMetadata(); md != nil {
		t.Fatalf("replay admitted with metadata %v, want none (no lease, nothing to store)", md)
	}

	r, got, err := e.fetch(t, mark, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if r.StatusCode != 201 || sha(got) != sha(body) {
		t.Fatalf("replay = %d, %d bytes (sha %s); want 201, %d bytes (sha %s)", r.StatusCode, len(got), sha(got), len(body), sha(body))
	}
	if r.Header.Get(HeaderIdempotentReplayed) != "true" || r.Header.Get("Content-Type") != "application/octet-stream" || r.Header.Get("X-Unlisted") != "" {
		t.Errorf("replay headers %v, want Idempotent-Replayed, content-type, no x-unlisted", r.Header)
	}
	if e.event(apiReplay, idempotency.EventReplayed) != 1 {
		t.Errorf("replay events = %v, want 1", e.event(apiReplay, idempotency.EventReplayed))
	}
	// The ticket names the route that issued it, so the endpoint, which
	// holds no policy, counts the replay under that route.
	for api, want := range map[string]float64{envoy.APIExtAuthz: 1, apiReplay: 1} {
		if got := e.events.RouteValue(api, "orders", idempotency.EventReplayed); got != want {
			t.Errorf("%s replayed on route orders = %v, want %v", api, got, want)
		}
	}
}

// No one reaches a replay without a ticket this replica's secret signed,
// for this key, before it expires.
func TestReplayTicketIsUnforgeable(t *testing.T) {
	e := startReplay(t, true)
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), []byte("secret reply"))
	mark := markOf(t, e.post(t, "/orders/1", "acme", "k1", []byte("{}")))
	good := mark.ticket

	other, _ := NewReplayer([]byte(strings.Repeat("o", MinReplaySecret)), nil)
	var ref blob.Ref
	{
		tk, _ := e.replayer.verify(good)
		ref = tk.Ref
	}
	foreign := other.issue("orders", "acme", "k1", HeaderIdempotencyKey, idempotency.Response{Status: 201, BodyRef: &ref}, nil)
	payload, sig, _ := strings.Cut(good, ".")
	var tk map[string]any
	raw, _ := decodeB64(payload)
	_ = json.Unmarshal(raw, &tk)
	tk["key"] = "k2"
	forged, _ := json.Marshal(tk)
	cases := map[string]struct{ ticket, key string }{
		"none":            {"", "k1"},
		"other secret":    {foreign, "k1"},
		"edited payload":  {encodeB64(forged) + "." + sig, "k2"},
		"other key":       {good, "k2"},
		"garbage":         {"abc", "k1"},
		"signature moved": {payload + "." + encodeB64([]byte("x")), "k1"},
	}
	for name, c := range cases {
		r, b, err := e.fetch(t, replayMark{ticket: c.ticket, scope: mark.scope}, c.key)
		if err != nil || r.StatusCode != 403 || strings.Contains(string(b), "secret reply") {
			t.Errorf("%s: %v %v %q, want 403 without the body", name, r.StatusCode, err, b)
		}
	}
	if n := e.event(apiReplay, EventReplayForbidden); n != float64(len(cases)) {
		t.Errorf("forbidden events = %v, want %d", n, len(cases))
	}
	e.tclock.Advance(DefaultTicketTTL + 2*time.Second)
	if r, _, _ := e.fetch(t, mark, "k1"); r.StatusCode != 403 {
		t.Errorf("expired ticket: %d, want 403", r.StatusCode)
	}
}

// A body that is gone is 503 replay-unavailable (never a re-run); a body
// that does not match its reference cuts the reply short.
func TestReplayMissingOrCorruptBody(t *testing.T) {
	e := startReplay(t, true)
	ref := e.storeLarge(t, "/orders/1", "k1", []byte("{}"), []byte("the stored reply"))
	good := markOf(t, e.post(t, "/orders/1", "acme", "k1", []byte("{}")))

	bad := ref
	bad.SHA256 = sha([]byte("other"))
	corrupt := good
	corrupt.ticket = e.replayer.issue("orders", "acme", "k1", HeaderIdempotencyKey, idempotency.Response{Status: 201, BodyRef: &bad}, nil)
	// A store that detects it on Open gives 503; one that detects it at
	// EOF (S3: after the status went out) cuts the connection. Never a
	// complete 201.
	if r, _, err := e.fetch(t, corrupt, "k1"); err == nil && r.StatusCode == 201 {
		t.Error("corrupt body served as a complete 201, want 503 or the connection cut")
	}

	_ = e.blobs.Delete(context.Background(), ref.Name)
	r, b, err := e.fetch(t, good, "k1")
	if err != nil || r.StatusCode != 503 || !strings.Contains(string(b), ProblemReplayUnavailable) {
		t.Fatalf("missing body: %v %v %s, want 503 %s", r.StatusCode, err, b, ProblemReplayUnavailable)
	}
}

// Without replay configured, a record whose body is in object storage is
// answered 503 replay-unavailable and never admitted upstream.
func TestAuthzReplayWithoutReplayer(t *testing.T) {
	e := startReplay(t, false)
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), []byte("x"))
	wantDenied(t, e.post(t, "/orders/1", "acme", "k1", []byte("{}")), 503, ProblemReplayUnavailable)
}

// Wiring (a): ext_proc answers the body with the ticket and a route-cache
// clear, and lets the replay's response through unbuffered.
func TestExtProcReplayFromObjectStorage(t *testing.T) {
	e := startReplay(t, true)
	body := []byte("stored reply bytes")
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), body)
	s := e.open(t)
	r := s.send(reqHeaders(buffered, false, nil, ":method", "POST", ":path", "/orders/1", "x-tenant-id", "acme",
		"idempotency-key", "k1", HeaderReplayTicket, "client-forged"))
	if r.GetRequestHeaders() == nil {
		t.Fatalf("request headers answered %v", r)
	}
	r = s.send(reqBody([]byte("{}")))
	cr := r.GetRequestBody().GetResponse()
	set := cr.GetHeaderMutation().GetSetHeaders()
	if cr == nil || !cr.GetClearRouteCache() || len(set) != 2 || set[0].GetHeader().GetKey() != HeaderReplayTicket || set[1].GetHeader().GetKey() != HeaderReplayScope {
		t.Fatalf("request body answered %v, want the ticket and scope proof set and the route cache cleared", r)
	}
	mark := replayMark{ticket: string(set[0].GetHeader().GetRawValue()), scope: string(set[1].GetHeader().GetRawValue())}
	rh := s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "201"))
	if m := rh.GetModeOverride(); m == nil || m.GetResponseBodyMode().String() != "NONE" {
		t.Fatalf("response headers answered %v, want a mode override to response body NONE", rh)
	}
	s.close()
	resp, got, err := e.fetch(t, mark, "k1")
	if err != nil || resp.StatusCode != 201 || string(got) != string(body) {
		t.Fatalf("replay = %v %v %q", resp.StatusCode, err, got)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func decodeB64(s string) ([]byte, error) { return base64RawURL.DecodeString(s) }
func encodeB64(b []byte) string          { return base64RawURL.EncodeToString(b) }

var base64RawURL = base64.RawURLEncoding

// Wiring (b): a request ext_authz marked for replay reaches ext_proc with
// the ticket and no lease; its response is let through without buffering.
func TestExtProcLetsMarkedReplayThrough(t *testing.T) {
	e := startReplay(t, true)
	s := e.open(t)
	ticket := e.replayer.issue("orders", "acme", "k1", HeaderIdempotencyKey, idempotency.Response{Status: 201, BodyRef: &blob.Ref{}}, nil)
	r := s.send(reqHeaders(filterv3.ProcessingMode_NONE, false, nil, ":method", "POST", ":path", "/orders/1", "x-tenant-id", "acme",
		"idempotency-key", "k1", HeaderReplayTicket, ticket))
	if r.GetRequestHeaders() == nil || r.GetRequestHeaders().GetResponse() != nil {
		t.Fatalf("request headers answered %v, want a plain continue", r)
	}
	rh := s.send(respHeaders(respAttrs(viaUpstream, 0), false, ":status", "201"))
	if m := rh.GetModeOverride(); m == nil || m.GetResponseBodyMode().String() != "NONE" {
		t.Fatalf("response headers answered %v, want a mode override to response body NONE", rh)
	}
	s.close()
	if n := e.event(apiExtProc, idempotency.EventStored) + e.event(apiExtProc, idempotency.EventSkipped); n != 0 {
		t.Errorf("stored/skipped events = %v, want none", n)
	}
}

// TestReplayElsewhereReleasesItsSlot: a replay re-routed to the replay
// endpoint is admitted (OK with the ticket headers) but sends nothing to
// the upstream, so ext_authz releases its max_in_flight slot at once
// instead of handing it to an ext_proc stream that never comes.
func TestReplayElsewhereReleasesItsSlot(t *testing.T) {
	r, err := NewReplayer([]byte(strings.Repeat("s", MinReplaySecret)), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	slots := inflightmem.New(inflightmem.Config{Now: func() time.Time { return envoytest.T0 }})
	e := &replayEnv{idemEnv: startIdemStore(t, `
http:
  tenant: {header: x-tenant-id}
  routes:
    - {name: orders, path_prefix: /orders, max_in_flight: 1, idempotency: {key_required: true}}
`, nil, WithReplay(r), WithInFlight(slots)), blobs: blobtest.New(), replayer: r}
	e.storeLarge(t, "/orders/1", "k1", []byte("{}"), []byte("stored"))
	resp := e.post(t, "/orders/1", "acme", "k1", []byte("{}"))
	markOf(t, resp)
	if md := resp.GetDynamicMetadata().GetFields()[envoy.MetadataInFlight]; md != nil {
		t.Fatalf("re-routed replay hands on an in-flight slot: %v", md)
	}
	md := wantLease(t, e.post(t, "/orders/1", "acme", "k2", []byte("{}")), envoy.ActionLease)
	if md.GetFilterMetadata()[envoy.ExtAuthzNamespace].GetFields()[envoy.MetadataInFlight] == nil {
		t.Fatal("the next request got no slot: the re-routed replay still holds the only one")
	}
}
