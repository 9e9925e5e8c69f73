package admin

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A web page the operator has open can send requests to a listener on
// their machine (a port-forward to 127.0.0.1:9003): a form post, a
// no-cors fetch, or a fetch from a name it has rebound to 127.0.0.1. None
// may reach the API. What a page cannot fake: browsers send Origin on
// every cross-origin (and every POST) request and Sec-Fetch-Site on every
// request, a page cannot set Content-Type: application/json across origins
// without a CORS preflight (which the API never grants), and a rebound
// page's requests carry its own name in Host.

// refuseBrowser refuses a request a web page may have sent: from another
// origin, or, without a token, to a name other than a loopback one (DNS
// rebinding; the token-less listener is loopback only).
func (a *API) refuseBrowser(r *http.Request) *problem {
	refuse := func(param, detail string) *problem {
		return &problem{Status: http.StatusForbidden, Title: "Cross-origin request refused", Detail: detail, param: param}
	}
	if a.o.Token == "" && !loopbackHost(r.Host) {
		return refuse("Host", "without a token the admin API answers only requests to a loopback name (127.0.0.1, [::1], localhost)")
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return refuse("Sec-Fetch-Site", "the admin API answers no request a web page of another origin sent")
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
		return refuse("Origin", "the admin API answers no request a web page of another origin sent")
	}
	return nil
}

// loopbackHost reports whether a Host header names the loopback interface.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sameOrigin reports whether an Origin header names the request's own
// host ("null", an opaque origin, never does).
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// jsonOnly wraps a state-changing or body-reading handler: it refuses any
// Content-Type but application/json (415), so that no HTML form, which
// any page can post anywhere, is served.
func jsonOnly(h handler) handler {
	return func(r *http.Request) (any, []string, error) {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return nil, nil, &problem{Status: http.StatusUnsupportedMediaType, Title: "Unsupported media type", param: "Content-Type",
				Detail: "send Content-Type: application/json (parameters stay in the query string): form posts are refused, since any web page can make one"}
		}
		return h(r)
	}
}
