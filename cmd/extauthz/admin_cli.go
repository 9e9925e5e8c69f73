package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/extauthz/extauthz/pkg/admin"
)

const adminDefaultAddr = "127.0.0.1:9003"

const adminUsage = `usage: extauthz admin COMMAND [flags] [ARGS]
  state   [-domain D] DESCRIPTOR...     every limit the descriptors match: rule, algorithm, key,
                                        limit, remaining, reset (nothing is charged)
  reset   [-domain D] DESCRIPTOR...     delete those counters; prints which keys, and the state after
  explain [-domain D] [-hits N] DESCRIPTOR...
                                        what ShouldRateLimit would answer now, and why
  explain http [-method M] [-path P] [-host H] [-H 'name: value']... [-source IP]
                                        the route, identity, limits and answer of ext_authz
  record get    -route R -key K [-identity I]
                                        an Idempotency-Key record: state, owner, expiry, status, body
  record delete -route R -key K [-identity I] [-force]
                                        delete it (one in flight only with -force)
  DESCRIPTOR is key=value[,key=value...]; -domain defaults to edge.
  Every command takes -addr (default $EXTAUTHZ_ADMIN_ADDR, else 127.0.0.1:9003). The token comes from
  $EXTAUTHZ_ADMIN_TOKEN_FILE (the file's contents) or $EXTAUTHZ_ADMIN_TOKEN, never the command line,
  which any user of the machine can read (ps).
  Prints the answer as JSON; exits 0 on success, 1 when the call failed or was refused, 2 on a usage error.
`

// adminCall is one HTTP call to the admin API.
type adminCall struct {
	method, path string
	query        url.Values
	body         any
}

// adminMain runs `extauthz admin ...`.
func adminMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	call, conn, err := parseAdmin(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "extauthz admin: %v\n", err)
		}
		fmt.Fprint(stderr, adminUsage)
		return 2
	}
	status, body, err := conn.do(ctx, call)
	if err != nil {
		fmt.Fprintf(stderr, "extauthz admin: %s: %v\n", conn.addr, err)
		return 1
	}
	var out bytes.Buffer
	if json.Indent(&out, body, "", "  ") != nil {
		out.Reset()
		out.Write(body)
	}
	w := stdout
	if status >= 300 {
		w = stderr
	}
	fmt.Fprintln(w, strings.TrimSpace(out.String()))
	if status >= 300 {
		return 1
	}
	return 0
}

// adminConn is where and how to call the API.
type adminConn struct{ addr, token string }

// parseAdmin reads the command line into a call.
func parseAdmin(args []string, stderr io.Writer) (adminCall, adminConn, error) {
	if len(args) == 0 {
		return adminCall{}, adminConn{}, errors.New("missing command")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help", "help":
		return adminCall{}, adminConn{}, flag.ErrHelp
	}
	if err := refuseTokenFlag(args); err != nil {
		return adminCall{}, adminConn{}, err
	}
	if cmd == "record" || (cmd == "explain" && len(args) > 0 && args[0] == "http") {
		if len(args) == 0 {
			return adminCall{}, adminConn{}, errors.New("record: want get or delete")
		}
		cmd, args = cmd+" "+args[0], args[1:]
	}
	fs := flag.NewFlagSet("admin "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn := adminConn{}
	fs.StringVar(&conn.addr, "addr", envOr("EXTAUTHZ_ADMIN_ADDR", adminDefaultAddr), "admin API address")
	build, ok := adminCommands[cmd]
	if !ok {
		return adminCall{}, conn, fmt.Errorf("unknown command %q", cmd)
	}
	call, err := build(fs, args)
	if err != nil {
		return call, conn, err
	}
	conn.token, err = Config{AdminToken: os.Getenv("EXTAUTHZ_ADMIN_TOKEN"), AdminTokenFile: os.Getenv("EXTAUTHZ_ADMIN_TOKEN_FILE")}.adminToken()
	return call, conn, err
}

// refuseTokenFlag refuses the -token flag of earlier versions: a command
// line is readable by every user of the machine (ps, /proc/PID/cmdline).
// The error does not repeat the value.
func refuseTokenFlag(args []string) error {
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "token" {
			return errors.New("-token is not accepted: a token on the command line shows in the process list; " +
				"put it in a file named by EXTAUTHZ_ADMIN_TOKEN_FILE (or set EXTAUTHZ_ADMIN_TOKEN)")
		}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// adminCommands build each command's call from its flags and arguments.
var adminCommands = map[string]func(fs *flag.FlagSet, args []string) (adminCall, error){
	"state": func(fs *flag.FlagSet, args []string) (adminCall, error) {
		return descriptorCall(fs, args, "GET", "/v1/ratelimit/state")
	},
	"reset": func(fs *flag.FlagSet, args []string) (adminCall, error) {
		return descriptorCall(fs, args, "POST", "/v1/ratelimit/reset")
	},
	"explain":       explainRLSCall,
	"explain http":  explainHTTPCall,
	"record get":    func(fs *flag.FlagSet, args []string) (adminCall, error) { return recordCall(fs, args, "GET") },
	"record delete": func(fs *flag.FlagSet, args []string) (adminCall, error) { return recordCall(fs, args, "DELETE") },
}

func descriptorCall(fs *flag.FlagSet, args []string, method, path string) (adminCall, error) {
	domain := fs.String("domain", tryDefaultDomain, "rate limit domain")
	if err := fs.Parse(args); err != nil {
		return adminCall{}, err
	}
	if fs.NArg() == 0 {
		return adminCall{}, errors.New("at least one DESCRIPTOR (key=value[,key=value...]) is required")
	}
	for _, d := range fs.Args() {
		if _, err := parseDescriptor(d); err != nil {
			return adminCall{}, err
		}
	}
	return adminCall{method: method, path: path, query: url.Values{"domain": {*domain}, "descriptor": fs.Args()}}, nil
}

func explainRLSCall(fs *flag.FlagSet, args []string) (adminCall, error) {
	domain := fs.String("domain", tryDefaultDomain, "rate limit domain")
	hits := fs.Uint("hits", 0, "hits_addend (0 means 1)")
	if err := fs.Parse(args); err != nil {
		return adminCall{}, err
	}
	if fs.NArg() == 0 {
		return adminCall{}, errors.New("at least one DESCRIPTOR (key=value[,key=value...]) is required")
	}
	rl := &admin.RateLimitCall{Domain: *domain, HitsAddend: uint32(min(*hits, 1<<31))}
	for _, spec := range fs.Args() {
		d, err := parseDescriptor(spec)
		if err != nil {
			return adminCall{}, err
		}
		var es []admin.Entry
		for _, e := range d.GetEntries() {
			es = append(es, admin.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		rl.Descriptors = append(rl.Descriptors, es)
	}
	return adminCall{method: "POST", path: "/v1/explain", body: admin.ExplainRequest{RateLimit: rl}}, nil
}

func explainHTTPCall(fs *flag.FlagSet, args []string) (adminCall, error) {
	c := &admin.HTTPCall{Headers: headerFlags{}}
	fs.StringVar(&c.Method, "method", "GET", "HTTP method")
	fs.StringVar(&c.Path, "path", "/orders", "HTTP path (with query)")
	fs.StringVar(&c.Host, "host", "", "HTTP host")
	fs.StringVar(&c.SourceAddress, "source", "", "client address (Envoy's peer)")
	fs.StringVar(&c.Principal, "principal", "", "mTLS peer principal")
	fs.Var(headerFlags(c.Headers), "H", "request header 'name: value' (repeatable)")
	if err := fs.Parse(args); err != nil {
		return adminCall{}, err
	}
	if fs.NArg() != 0 {
		return adminCall{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.Method = strings.ToUpper(c.Method)
	return adminCall{method: "POST", path: "/v1/explain", body: admin.ExplainRequest{HTTP: c}}, nil
}

func recordCall(fs *flag.FlagSet, args []string, method string) (adminCall, error) {
	identity := fs.String("identity", "", "the caller's identity (scope), as `admin explain http` shows it")
	route := fs.String("route", "", "HTTP route name")
	key := fs.String("key", "", "Idempotency-Key")
	force := false
	if method == "DELETE" {
		fs.BoolVar(&force, "force", false, "delete a record in flight too (its request may still complete)")
	}
	if err := fs.Parse(args); err != nil {
		return adminCall{}, err
	}
	if *route == "" || *key == "" || fs.NArg() != 0 {
		return adminCall{}, errors.New("-route and -key are required, and nothing else")
	}
	q := url.Values{"identity": {*identity}, "route": {*route}, "key": {*key}}
	if force {
		q.Set("force", "true")
	}
	return adminCall{method: method, path: "/v1/idempotency/record", query: q}, nil
}

// do sends the call and returns the status and body.
func (c adminConn) do(ctx context.Context, call adminCall) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, tryTimeout)
	defer cancel()
	var body io.Reader
	if call.body != nil {
		b, err := json.Marshal(call.body)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	u := url.URL{Scheme: "http", Host: c.addr, Path: call.path, RawQuery: call.query.Encode()}
	req, err := http.NewRequestWithContext(ctx, call.method, u.String(), body)
	if err != nil {
		return 0, nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if call.method != http.MethodGet {
		// Required of every call that changes state or carries a body: a
		// web page cannot send it across origins without a CORS preflight.
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: tryTimeout + time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}
