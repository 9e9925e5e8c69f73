package upstream

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The login endpoint and usage reports, for the limits charged after the
// fact (issue 31): a login route limited by its failures, and budgets
// charged by what a reply cost.
//
//	POST /login[/...]             {"username": "u", "password": "p"} (JSON
//	                              or form-encoded): 200 when the password is
//	                              Password, else 401
//	X-Upstream-Usage: 300         the reply reports a usage of 300 tokens,
//	X-Upstream-Usage-In: json     where X-Upstream-Usage-In says: header
//	                              (X-Usage-Tokens, the default), trailer
//	                              (X-Usage-Tokens as a response trailer),
//	                              json (usage.total_tokens of the JSON body)
//	                              or sse (a text/event-stream whose last JSON
//	                              event carries usage.total_tokens, followed
//	                              by "data: [DONE]")
//	X-Upstream-Usage-Pad: 2097152 json and sse: that many bytes of content
//	                              before the usage (in the JSON body, or in
//	                              the usage event itself)
//	X-Upstream-Usage-Stall: 1     sse: the deltas, then nothing until the
//	                              client leaves (at most a minute), then the
//	                              usage
const (
	HeaderUsage      = "X-Upstream-Usage"
	HeaderUsageIn    = "X-Upstream-Usage-In"
	HeaderUsagePad   = "X-Upstream-Usage-Pad"
	HeaderUsageStall = "X-Upstream-Usage-Stall"
	// HeaderUsageTokens is the header or trailer the reply reports usage in.
	HeaderUsageTokens = "X-Usage-Tokens"
	// LoginPath is the login endpoint.
	LoginPath = "/login"
	// Password is the one password /login accepts, for every username.
	Password = "correct horse battery staple"
)

// maxLoginBody bounds what /login reads.
const maxLoginBody = 64 << 10

// serveLogin answers /login: 200 for the right password, 401 otherwise
// (and for a body it cannot read).
func serveLogin(w http.ResponseWriter, r *http.Request) {
	user, pass := loginFields(r)
	if pass != Password {
		w.Header().Set("WWW-Authenticate", `Basic realm="login"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid credentials", "username": user})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"username": user, "session": randomHex(16)})
}

// loginFields reads username and password from a JSON or form body.
func loginFields(r *http.Request) (user, pass string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLoginBody))
	if err != nil {
		return "", ""
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/x-www-form-urlencoded" {
		v, err := url.ParseQuery(string(body))
		if err != nil {
			return "", ""
		}
		return v.Get("username"), v.Get("password")
	}
	var in struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if json.Unmarshal(body, &in) != nil {
		return "", ""
	}
	return in.Username, in.Password
}

// usage is the usage object of a reply, as LLM APIs report it.
type usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func newUsage(total int64) usage {
	prompt := total / 3
	return usage{PromptTokens: prompt, CompletionTokens: total - prompt, TotalTokens: total}
}

// writeUsage answers a request with X-Upstream-Usage: its reply reports
// that usage where X-Upstream-Usage-In says. False when the header is
// absent or not a non-negative integer.
func writeUsage(w http.ResponseWriter, r *http.Request, status int, v Reply) bool {
	total, err := strconv.ParseInt(r.Header.Get(HeaderUsage), 10, 64)
	if err != nil || total < 0 {
		return false
	}
	switch r.Header.Get(HeaderUsageIn) {
	case "trailer":
		w.Header().Set("Trailer", HeaderUsageTokens)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
		w.Header().Set(HeaderUsageTokens, strconv.FormatInt(total, 10))
	case "json":
		writeJSON(w, status, struct {
			Reply
			Pad   string `json:"pad,omitempty"`
			Usage usage  `json:"usage"`
		}{v, usagePad(r), newUsage(total)})
	case "sse":
		writeEvents(w, r, status, newUsage(total))
	default:
		w.Header().Set(HeaderUsageTokens, strconv.FormatInt(total, 10))
		writeJSON(w, status, v)
	}
	return true
}

// writeEvents streams a chat completion as server-sent events, flushed
// one by one: a few content deltas, the usage in the last JSON event, and
// the terminating [DONE] (not JSON).
func writeEvents(w http.ResponseWriter, r *http.Request, status int, u usage) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	f, _ := w.(http.Flusher)
	send := func(data string) {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", data)
		if f != nil {
			f.Flush()
		}
	}
	for _, word := range []string{"Hello", ", ", "world"} {
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"delta": map[string]string{"content": word}}}})
		send(string(b))
		time.Sleep(5 * time.Millisecond) // separate chunks, as a model streams them
	}
	if r.Header.Get(HeaderUsageStall) != "" {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(maxDelay):
		}
	}
	last := map[string]any{"choices": []any{}, "usage": u}
	if pad := usagePad(r); pad != "" {
		last["choices"] = []any{map[string]any{"delta": map[string]string{"content": pad}}}
	}
	b, _ := json.Marshal(last)
	send(string(b))
	send("[DONE]")
}

// maxUsagePad bounds X-Upstream-Usage-Pad.
const maxUsagePad = 16 << 20

// usagePad is X-Upstream-Usage-Pad's content: that many bytes of text.
func usagePad(r *http.Request) string {
	n, err := strconv.Atoi(r.Header.Get(HeaderUsagePad))
	if err != nil || n <= 0 || n > maxUsagePad {
		return ""
	}
	return strings.Repeat("token ", n/6+1)[:n]
}
