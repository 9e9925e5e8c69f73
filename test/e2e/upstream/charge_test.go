package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// /login answers 200 for Password and 401 for anything else, from a JSON or
// a form body.
func TestLogin(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	tests := []struct {
		name, ct, body string
		want           int
	}{
		{"json right", "application/json", `{"username":"a","password":"` + Password + `"}`, 200},
		{"json wrong", "application/json", `{"username":"a","password":"nope"}`, 401},
		{"form right", "application/x-www-form-urlencoded", "username=a&password=" + strings.ReplaceAll(Password, " ", "+"), 200},
		{"form wrong", "application/x-www-form-urlencoded", "username=a&password=x", 401},
		{"not json", "application/json", `{`, 401},
	}
	for _, tt := range tests {
		resp, err := http.Post(srv.URL+LoginPath, tt.ct, strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}

// X-Upstream-Usage is reported where X-Upstream-Usage-In says.
func TestUsageReports(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	get := func(in string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/llm", nil)
		req.Header.Set(HeaderUsage, "300")
		req.Header.Set(HeaderUsageIn, in)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, _ := get("header"); resp.Header.Get(HeaderUsageTokens) != "300" {
		t.Errorf("header: %v", resp.Header)
	}
	if resp, _ := get("trailer"); resp.Trailer.Get(HeaderUsageTokens) != "300" || resp.Header.Get(HeaderUsageTokens) != "" {
		t.Errorf("trailer: header %v trailer %v", resp.Header, resp.Trailer)
	}
	_, body := get("json")
	var v struct {
		Usage struct {
			Total int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Usage.Total != 300 {
		t.Errorf("json: %q (%v)", body, err)
	}
	resp, body := get("sse")
	events := strings.Split(strings.TrimSpace(body), "\n\n")
	if resp.Header.Get("Content-Type") != "text/event-stream" || len(events) != 5 ||
		events[4] != "data: [DONE]" || !strings.Contains(events[3], `"total_tokens":300`) {
		t.Errorf("sse: %v %q", resp.Header, body)
	}
}
