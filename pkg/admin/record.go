package admin

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/extauthz/extauthz/pkg/envoy/authz"
	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/policy"
)

// RecordState answers the record endpoints.
type RecordState struct {
	Identity string `json:"identity"`
	Route    string `json:"route"`
	Key      string `json:"key"`
	// Scope is the record's scope (the identity, prefixed with the route
	// for routes whose key_scope is route).
	Scope            string  `json:"scope"`
	State            string  `json:"state"`
	Owner            string  `json:"owner"`
	Fingerprint      string  `json:"fingerprint"`
	ExpiresInSeconds float64 `json:"expires_in_seconds"`
	Status           int     `json:"status,omitempty"`
	Headers          int     `json:"headers,omitempty"`
	BodyBytes        int64   `json:"body_bytes"`
	// Body says where the body lives: "none", "inline" (in the record) or
	// "object storage" with BodyObject and BodySHA256.
	Body       string `json:"body"`
	BodyObject string `json:"body_object,omitempty"`
	BodySHA256 string `json:"body_sha256,omitempty"`
	Location   string `json:"location"`
	Deleted    bool   `json:"deleted,omitempty"`
	DeleteHint string `json:"hint,omitempty"`
}

// recordAddr is a record's address in a call: identity, route and key.
type recordAddr struct{ identity, route, key, scope string }

// recordGet answers GET /v1/idempotency/record.
func (a *API) recordGet(r *http.Request) (any, []string, error) {
	addr, err := a.recordQuery(r)
	if err != nil {
		return nil, nil, err
	}
	rec, found, err := a.o.Records.Inspect(r.Context(), addr.scope, addr.key)
	return a.recordAnswer(addr, rec, found, false, err)
}

// recordDelete answers DELETE /v1/idempotency/record[&force=true].
func (a *API) recordDelete(r *http.Request) (any, []string, error) {
	addr, err := a.recordQuery(r)
	if err != nil {
		return nil, nil, err
	}
	force := false
	if v := r.Form.Get("force"); v != "" {
		if force, err = strconv.ParseBool(v); err != nil {
			return nil, nil, badRequest("force", "force=%q: want true or false", v)
		}
	}
	rec, found, err := a.o.Records.Delete(r.Context(), addr.scope, addr.key, force)
	if errors.Is(err, idempotency.ErrInFlight) {
		st, keys, _ := a.recordAnswer(addr, rec, found, false, nil)
		return st, keys, &problem{Status: http.StatusConflict, Title: "Record in flight",
			Detail: "a request holds this key and may still complete; delete it with force=true (extauthz admin record delete -force) only if that request is known to be dead: a retry then runs again"}
	}
	return a.recordAnswer(addr, rec, found, err == nil && found, err)
}

// recordQuery reads identity, route and key, and finds the route's scope.
func (a *API) recordQuery(r *http.Request) (recordAddr, error) {
	if a.o.Records == nil {
		return recordAddr{}, &problem{Status: http.StatusNotImplemented, Title: "No idempotency store"}
	}
	if err := r.ParseForm(); err != nil {
		return recordAddr{}, badRequest("query", "%v", err)
	}
	addr := recordAddr{identity: r.Form.Get("identity"), route: r.Form.Get("route"), key: r.Form.Get("key")}
	if addr.route == "" || addr.key == "" {
		return addr, badRequest("route, key", "route and key are required (and identity: the caller's scope, as POST /v1/explain shows it)")
	}
	route := a.httpRoute(addr.route)
	if route == nil {
		return addr, &problem{Status: http.StatusNotFound, Title: "No such route",
			Detail: "the policy has no HTTP route " + strconv.Quote(addr.route), param: "route"}
	}
	addr.scope = authz.RecordScope(addr.identity, route)
	return addr, nil
}

func (a *API) httpRoute(name string) *policy.Route {
	p := a.o.Policies.Current()
	if p == nil || p.HTTP == nil {
		return nil
	}
	for _, rt := range p.HTTP.Routes {
		if rt.Name == name {
			return rt
		}
	}
	return nil
}

// recordAnswer renders a record, or the 404 of a free key.
func (a *API) recordAnswer(addr recordAddr, rec idempotency.Record, found, deleted bool, err error) (any, []string, error) {
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return nil, []string{idempotency.StorageKey(addr.scope, addr.key)}, &problem{Status: http.StatusNotFound, Title: "No record",
			Detail: "no record for this identity, route and key: the key is free (never used, expired, or deleted)"}
	}
	st := RecordState{Identity: addr.identity, Route: addr.route, Key: addr.key, Scope: addr.scope,
		State: string(rec.State), Owner: rec.Owner, Fingerprint: rec.Fingerprint,
		ExpiresInSeconds: seconds(rec.ExpiresIn), Status: rec.Status, Headers: rec.Headers,
		BodyBytes: rec.BodyBytes, Body: "none", Location: rec.Location, Deleted: deleted}
	switch {
	case rec.BodyRef != nil:
		st.Body, st.BodyObject, st.BodySHA256 = "object storage", rec.BodyRef.Name, rec.BodyRef.SHA256
	case rec.State == idempotency.StateCompleted:
		st.Body = "inline"
	}
	if deleted && rec.BodyRef != nil {
		st.DeleteHint = "the body object stays in the bucket until its lifecycle rule expires it"
	}
	return st, []string{rec.Location}, nil
}
