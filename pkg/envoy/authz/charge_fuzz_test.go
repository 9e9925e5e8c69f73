package authz

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/internal/envoytest"
	"github.com/extauthz/extauthz/pkg/idempotency/memstore"
	"github.com/extauthz/extauthz/pkg/policy"
	lockoutmem "github.com/extauthz/extauthz/pkg/ratelimit/lockout/memstore"
)

// FuzzChargeServers: whatever a request and its response carry (path,
// body, status, cost header, content type, reply body in chunks), neither
// server panics nor fails the call, and every answer is a continue or a
// well-formed reply.
func FuzzChargeServers(f *testing.F) {
	f.Add("/login", []byte(`{"username":"a"}`), "401", "1", "application/json", []byte(`{"usage":{"total_tokens":3}}`), 3)
	f.Add("/v1/chat", []byte("username=a"), "200", "-5", "text/event-stream", []byte("data: {\"usage\":{\"total_tokens\":1e30}}\n\n"), 1)
	f.Add("/h", []byte{0xff}, "abc", "9999999999999999999", "text/event-stream;x", []byte("\r\n\r\ndata:\n\n"), 0)
	f.Add("/login", []byte(`{"username":"a","Username":"b","USERNAME":"c","UserName":"d","userName":"e"}`), "401", "", "application/json", []byte(nil), 1)
	f.Add("/form-login", []byte("username=a&x=%zz;y&Username=%ef%bc%a1"), "401", "", "application/x-www-form-urlencoded; charset=utf-8", []byte(nil), 1)
	f.Add("/form-login", []byte(`{"username":"a"}`), "401", "", "application/json", []byte(nil), 1)
	p := envoytest.WritePolicy(f, chargePolicy)
	reg := prometheus.NewRegistry()
	m, _ := envoy.NewMetrics(reg)
	ev, _ := NewIdempotencyMetrics(reg)
	cm, _ := NewChargeMetrics(reg)
	store := memstore.New(memstore.Config{})
	limits := envoytest.NewTestStore(f, t0Func)
	opts := WithCharges(limits, lockoutmem.New(lockoutmem.Config{Now: t0Func}), cm)
	src := envoy.PolicyFunc(func() *policy.Policy { return p })
	proc, _ := NewExtProc(store, src, m, ev, opts)
	az, _ := NewAuthz(limits, store, src, m, ev, opts)
	f.Fuzz(func(t *testing.T, path string, body []byte, status, cost, ctype string, reply []byte, chunk int) {
		req := checkFrom("192.0.2.1", "POST", path, body, "x-tenant-id", "acme", "x-max-tokens", cost, "content-type", ctype)
		r, err := az.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("Check failed on request input: %v", err)
		}
		if d := r.GetDeniedResponse(); d != nil {
			checkStatus(t, int(d.GetStatus().GetCode()))
		}
		st := newProcStream(context.Background(), proc)
		first := reqHeaders(filterv3.ProcessingMode_BUFFERED, false, nil, ":method", "POST", ":path", path, "x-tenant-id", "acme", "content-type", ctype)
		first.ProtocolConfig.ResponseBodyMode = filterv3.ProcessingMode_STREAMED
		for _, msg := range []*extprocv3.ProcessingRequest{first, reqBody(body),
			respHeaders(respAttrs(viaUpstream, 0), false, ":status", status, "x-usage-tokens", cost, "content-type", ctype)} {
			st.observe(msg)
			resp, err := st.handle(msg)
			if err != nil {
				t.Fatalf("ext_proc failed on request input: %v", err)
			}
			if ir := resp.GetImmediateResponse(); ir != nil {
				checkStatus(t, int(ir.GetStatus().GetCode()))
				st.finish()
				return
			}
		}
		for n := max(chunk, 1); len(reply) > 0; reply = reply[min(n, len(reply)):] {
			msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: reply[:min(n, len(reply))]}}}
			if _, err := st.handle(msg); err != nil {
				t.Fatal(err)
			}
		}
		st.finish()
	})
}

// FuzzChargeKeyParsers: whatever a body holds, reading an account from it
// never panics, and every value a standard parser binds is among the
// values read: Go's encoding/json (last duplicate wins, exact name) and
// net/url's form parser (each value, when the whole form parses).
func FuzzChargeKeyParsers(f *testing.F) {
	for _, seed := range []string{
		`{"username":"carol"}`, `{"username":"a","username":"b"}`, `{"Username":"carol"}`, `{"user":{"name":"x"}}`,
		`{"username":"carol","pad":"` + "\\u0000" + `"}`, `[1,{"username":"x"}]`, `{"username":1e400}`, `{"\u0075sername":"x"}`,
		"username=carol&x=%zz", "a=1;b=2&username=carol", "username=a&username=b", "%75sername=%ZZ+%41", "username=%", "&&=&username",
		"\xff\xfe{", strings.Repeat("[", 300),
		"--B\r\nContent-Disposition: form-data; name=\"username\"\r\n\r\ncarol\r\n--B--\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, key := range []policy.ChargeKey{
			{Kind: policy.ChargeKeyJSONField, Name: "username", Normalize: policy.DefaultNormalization, Duplicates: policy.DuplicatesAll},
			{Kind: policy.ChargeKeyFormField, Name: "username", Normalize: policy.DefaultNormalization, Duplicates: policy.DuplicatesLast, ExactFieldNames: true},
		} {
			for _, ct := range []string{ctJSON, ctForm, "", "text/plain; charset=\x00", "multipart/form-data; boundary=B"} {
				in := callerInput{headers: headerList{{Name: "content-type", Value: ct}}}
				raw, _ := accountValues(key, in, keyBody{data: body})
				for _, v := range distinctNormalized(raw, key) {
					if v == "" {
						t.Fatalf("an empty value became a key (%q as %q)", body, ct)
					}
				}
			}
		}
		var doc map[string]any
		if json.Unmarshal(body, &doc) == nil {
			if want, ok := doc["username"].(string); ok {
				got, err := jsonValues(body, []string{"username"}, false)
				if err != nil || !slices.Contains(got, want) {
					t.Errorf("encoding/json binds username %q; jsonValues read %q, %v", want, got, err)
				}
			}
		}
		if q, err := url.ParseQuery(string(body)); err == nil {
			got := formValues(body, fieldMatcher{name: "username", exact: true})
			for _, want := range q["username"] {
				if !slices.Contains(got, want) {
					t.Errorf("net/url binds username %q; formValues read %q", want, got)
				}
			}
		}
	})
}
