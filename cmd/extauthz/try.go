package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The README's example decision, which `extauthz try` sends when it is given
// no descriptor: the orders route of tenant acme in examples/policy.
const (
	tryDefaultAddr       = "127.0.0.1:9001"
	tryDefaultDomain     = "edge"
	tryDefaultDescriptor = "tenant=acme,route=orders"
	tryTimeout           = 5 * time.Second
)

const tryUsage = `usage:
  extauthz try [rls] [-addr HOST:PORT] [-domain D] [-hits N] [DESCRIPTOR...]
      ask ShouldRateLimit once; each DESCRIPTOR is key=value[,key=value...]
      (default: -domain edge tenant=acme,route=orders, the README's example)
  extauthz try authz [-addr HOST:PORT] [-method M] [-path P] [-host H] [-H 'name: value']... [-body B]
      ask ext_authz Check once for that HTTP request
      (default: GET /orders on host localhost with x-tenant-id: acme)
  Prints the server's answer as JSON; exits 0 when the server answered,
  1 when the call failed, 2 on a usage error.
`

// tryMain sends one decision request to a running extauthz (or any server
// of Envoy's APIs) with the project's own client and prints the answer, so
// a newcomer needs no grpcurl to see a decision.
func tryMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	api := "rls"
	if len(args) > 0 && (args[0] == "rls" || args[0] == "authz") {
		api, args = args[0], args[1:]
	}
	var (
		req  proto.Message
		addr string
		err  error
	)
	if api == "rls" {
		req, addr, err = parseTryRLS(args, stderr)
	} else {
		req, addr, err = parseTryAuthz(args, stderr)
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "extauthz try: %v\n", err)
		}
		fmt.Fprint(stderr, tryUsage)
		return 2
	}
	resp, err := tryCall(ctx, addr, req)
	if err != nil {
		fmt.Fprintf(stderr, "extauthz try: %s: %v\n", addr, err)
		return 1
	}
	if err := printJSON(stdout, resp); err != nil {
		fmt.Fprintf(stderr, "extauthz try: %v\n", err)
		return 1
	}
	return 0
}

// printJSON writes m as indented JSON. protojson's own multi-line form
// varies its spacing on purpose; re-indenting gives the same bytes each run.
func printJSON(w io.Writer, m proto.Message) error {
	compact, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, compact, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// parseTryRLS reads `try rls` flags and descriptors into a RateLimitRequest.
func parseTryRLS(args []string, stderr io.Writer) (proto.Message, string, error) {
	fs := flag.NewFlagSet("try rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", tryDefaultAddr, "extauthz gRPC address")
	domain := fs.String("domain", tryDefaultDomain, "rate limit domain")
	hits := fs.Uint("hits", 0, "hits_addend (0 means 1)")
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	specs := fs.Args()
	if len(specs) == 0 {
		specs = []string{tryDefaultDescriptor}
	}
	req := &rlsv3.RateLimitRequest{Domain: *domain, HitsAddend: uint32(min(*hits, 1<<31))}
	for _, spec := range specs {
		d, err := parseDescriptor(spec)
		if err != nil {
			return nil, "", err
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req, *addr, nil
}

// parseDescriptor reads "k=v,k=v" (a value may contain '=', not ',').
func parseDescriptor(spec string) (*commonrlv3.RateLimitDescriptor, error) {
	d := &commonrlv3.RateLimitDescriptor{}
	for pair := range strings.SplitSeq(spec, ",") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("descriptor %q: want key=value[,key=value...]", spec)
		}
		d.Entries = append(d.Entries, &commonrlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d, nil
}

// headerFlags collects repeated -H 'name: value' flags.
type headerFlags map[string]string

func (h headerFlags) String() string { return fmt.Sprint(map[string]string(h)) }

func (h headerFlags) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.ToLower(strings.TrimSpace(name))
	if !ok || name == "" {
		return fmt.Errorf("header %q: want 'name: value'", s)
	}
	h[name] = strings.TrimSpace(value)
	return nil
}

// parseTryAuthz reads `try authz` flags into a CheckRequest shaped as
// Envoy's ext_authz filter sends it.
func parseTryAuthz(args []string, stderr io.Writer) (proto.Message, string, error) {
	fs := flag.NewFlagSet("try authz", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", tryDefaultAddr, "extauthz gRPC address")
	method := fs.String("method", "GET", "HTTP method")
	path := fs.String("path", "/orders", "HTTP path (with query)")
	host := fs.String("host", "localhost", "HTTP host")
	body := fs.String("body", "", "request body (sent as Envoy sends a buffered body)")
	source := fs.String("source", "127.0.0.1", "client address")
	headers := headerFlags{}
	fs.Var(headers, "H", "request header 'name: value' (repeatable; default x-tenant-id: acme)")
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	if fs.NArg() != 0 {
		return nil, "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if len(headers) == 0 {
		headers["x-tenant-id"] = "acme"
	}
	httpReq := &authv3.AttributeContext_HttpRequest{
		Id: "extauthz-try", Method: strings.ToUpper(*method), Path: *path, Host: *host,
		Scheme: "http", Protocol: "HTTP/1.1", Headers: headers,
	}
	if *body != "" {
		httpReq.RawBody = []byte(*body)
		httpReq.Size = int64(len(*body))
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: *source, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 50000}},
		}}},
		Request: &authv3.AttributeContext_Request{Http: httpReq},
	}}
	return req, *addr, nil
}

// tryCall sends req (a RateLimitRequest or a CheckRequest) over plaintext
// gRPC and returns the answer.
func tryCall(ctx context.Context, addr string, req proto.Message) (proto.Message, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, tryTimeout)
	defer cancel()
	switch r := req.(type) {
	case *rlsv3.RateLimitRequest:
		return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, r)
	case *authv3.CheckRequest:
		return authv3.NewAuthorizationClient(conn).Check(ctx, r)
	}
	return nil, fmt.Errorf("cannot send %T", req)
}
