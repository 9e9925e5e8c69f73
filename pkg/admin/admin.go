// Package admin is the operator's HTTP API: read and reset rate-limit
// counters, explain a decision, and inspect or delete an Idempotency-Key
// record. It serves JSON on its own listener (the caller's), answers
// errors as problem+json, refuses what a web page could send (origin.go),
// checks a bearer token when one is set, and reports every call to an
// audit callback (which never carries a value the caller sent) and a
// counter: libraries do not log, the caller decides where the audit trail
// goes.
//
// It decides nothing itself, and speaks none of Envoy's protos: state and explanations come from the RLS and
// ext_authz servers' own planning (rls.RLS.Explain, authz.Authz.Explain),
// reads are 0-hit decisions that charge nothing, and resets and deletions
// go through the stores' operator methods (ratelimit.Resetter,
// idempotency.Inspector).
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/envoy/rls"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// RateLimitExplainer is the RLS server's explanation (*rls.RLS).
type RateLimitExplainer interface {
	Explain(ctx context.Context, q rls.Query) (rls.Explanation, error)
}

// HTTPExplainer is the ext_authz server's explanation (*authz.Authz).
type HTTPExplainer interface {
	Explain(ctx context.Context, r authz.HTTPRequest) (authz.Explanation, error)
}

// Options configures the API. RLS, HTTP, Limits, Policies and Registerer
// are required; Records may be nil (the record endpoints answer 501).
type Options struct {
	RLS  RateLimitExplainer
	HTTP HTTPExplainer
	// Limits is the rate-limit store the servers decide with (unwrapped by
	// tracing): its keys are named and reset through it.
	Limits ratelimit.Resetter
	// Records is the Idempotency-Key store.
	Records idempotency.Inspector
	// Policies finds the HTTP routes of the record endpoints.
	Policies envoy.PolicySource
	// Token, when not empty, is required as "Authorization: Bearer <Token>".
	Token string
	// Audit receives every call, answered or refused; nil drops them.
	Audit func(Audit)
	// Registerer takes extauthz_admin_requests_total.
	Registerer prometheus.Registerer
}

// Audit is one call, for the audit log.
type Audit struct {
	// Remote is the caller's address; Authenticated whether it presented
	// the token (false as well when no token is configured).
	Remote        string
	Authenticated bool
	// Endpoint is the metric label of the call, Method its HTTP method
	// ("other" for one the API does not know).
	Endpoint, Method string
	// Status is the HTTP status answered; Keys the store keys read,
	// reset or deleted; Detail, on an error, the problem's title and the
	// parameter at fault.
	//
	// Nothing the caller sent is here verbatim: a descriptor, a JSON field
	// name or a route name may carry a credential (an API key entry) in
	// clear, while Keys hold it hashed as the stores do. The problem
	// answered to the caller may quote its values back; the audit never.
	Status int
	Keys   []string
	Detail string
}

// API serves the admin endpoints; it is an http.Handler.
type API struct {
	o     Options
	mux   *http.ServeMux
	calls *prometheus.CounterVec
}

// New returns the API. It fails on a missing dependency or a metric
// already registered.
func New(o Options) (*API, error) {
	switch {
	case envoy.IsNil(o.RLS), envoy.IsNil(o.HTTP), envoy.IsNil(o.Limits), envoy.IsNil(o.Policies):
		return nil, errors.New("admin: New needs RLS, HTTP, Limits and Policies")
	case o.Registerer == nil:
		return nil, errors.New("admin: New needs a Registerer")
	}
	a := &API{o: o, mux: http.NewServeMux(), calls: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "extauthz_admin_requests_total",
		Help: "Admin API calls by endpoint and HTTP status code answered.",
	}, []string{"endpoint", "code"})}
	if err := o.Registerer.Register(a.calls); err != nil {
		return nil, err
	}
	a.route("GET /v1/ratelimit/state", "ratelimit_state", a.state)
	a.route("POST /v1/ratelimit/reset", "ratelimit_reset", jsonOnly(a.reset))
	a.route("POST /v1/explain", "explain", jsonOnly(a.explain))
	a.route("GET /v1/idempotency/record", "record_get", a.recordGet)
	a.route("DELETE /v1/idempotency/record", "record_delete", jsonOnly(a.recordDelete))
	a.route("/", "unknown", func(r *http.Request) (any, []string, error) {
		if allow, ok := methods[r.URL.Path]; ok {
			return nil, nil, &problem{Status: http.StatusMethodNotAllowed, Title: "Method not allowed",
				Detail: r.URL.Path + " takes " + allow}
		}
		return nil, nil, &problem{Status: http.StatusNotFound, Title: "No such endpoint",
			Detail: "see docs/admin.md: /v1/ratelimit/state, /v1/ratelimit/reset, /v1/explain, /v1/idempotency/record"}
	})
	return a, nil
}

// methods are the methods each endpoint takes, for a 405's detail.
var methods = map[string]string{
	"/v1/ratelimit/state":    "GET",
	"/v1/ratelimit/reset":    "POST",
	"/v1/explain":            "POST",
	"/v1/idempotency/record": "GET or DELETE",
}

// ServeHTTP implements http.Handler.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.mux.ServeHTTP(w, r) }

// handler answers one call: a value to send as JSON, the store keys it
// touched, or an error (a *problem, or a store failure: 503).
type handler func(r *http.Request) (any, []string, error)

// route registers h under pattern; every call is checked for a web
// page's origin, authenticated, answered, counted and audited here, so
// that no endpoint can forget one of them.
func (a *API) route(pattern, endpoint string, h handler) {
	a.calls.WithLabelValues(endpoint, "200") // the series exist before the first call
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		authed, ok := a.authenticate(r)
		var body any
		var keys []string
		var err error
		switch refused := a.refuseBrowser(r); {
		case refused != nil:
			err = refused
		case !ok:
			err = &problem{Status: http.StatusUnauthorized, Title: "Unauthorized",
				Detail: "send Authorization: Bearer <EXTAUTHZ_ADMIN_TOKEN>"}
			w.Header().Set("WWW-Authenticate", `Bearer realm="extauthz-admin"`)
		default:
			body, keys, err = h(r)
		}
		status, detail := http.StatusOK, ""
		if err != nil {
			p := asProblem(err)
			status, detail, body = p.Status, p.audit(), p
			w.Header().Set("Content-Type", authz.ContentTypeProblem)
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		_ = enc.Encode(body) // the client hung up: nothing left to tell it
		a.calls.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
		if a.o.Audit != nil {
			a.o.Audit(Audit{Remote: r.RemoteAddr, Authenticated: authed, Endpoint: endpoint, Method: auditMethod(r.Method), Status: status, Keys: keys, Detail: detail})
		}
	})
}

// authenticate reports whether r presented the token, and whether it may
// proceed (always, when no token is configured: the listener is then
// loopback only).
func (a *API) authenticate(r *http.Request) (authed, ok bool) {
	if a.o.Token == "" {
		return false, true
	}
	h := r.Header.Get("Authorization")
	const scheme = "bearer "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return false, false
	}
	authed = subtle.ConstantTimeCompare([]byte(strings.TrimSpace(h[len(scheme):])), []byte(a.o.Token)) == 1
	return authed, authed
}

// auditMethod is the method as the audit records it: any token is a
// method to net/http, so one the API does not know is "other".
func auditMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return m
	}
	return "other"
}
