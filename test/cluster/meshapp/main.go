// Command meshapp is the workload of test/cluster's mesh test, packed into
// an image there. With MESHAPP_TARGET set it is a client: it forwards
// every request it gets to that URL (its sidecar then carries the call
// through the mesh). Without, it is a server that answers each request it
// executes with a body naming the pod and the execution's number, so that
// a replay (the same body again) is told apart from a second execution.
package main

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync/atomic"
)

func main() {
	handler := http.Handler(http.HandlerFunc(serve))
	if target := os.Getenv("MESHAPP_TARGET"); target != "" {
		u, err := url.Parse(target)
		if err != nil {
			log.Fatalf("MESHAPP_TARGET: %v", err)
		}
		handler = forwarder(u)
	}
	log.Fatal(http.ListenAndServe(":8080", handler))
}

var executions atomic.Int64

func serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	n := executions.Add(1)
	host, _ := os.Hostname()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"pod\":%q,\"execution\":%d,\"method\":%q,\"path\":%q,\"body_bytes\":%d}\n", host, n, r.Method, r.URL.Path, len(body))
}

// forwarder sends each request on to target, with the target's host as
// its authority (the name the client sidecar routes by).
func forwarder(target *url.URL) http.Handler {
	return &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
}
