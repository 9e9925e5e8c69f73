// Command extauthz serves Envoy's rate limit (RLS v3), rate limit quota
// (RLQS v3), ext_authz and ext_proc gRPC APIs from one process; see the
// README for its configuration.
//
//	extauthz                 serve (the default)
//	extauthz serve           the same
//	extauthz validate PATH   check a policy file or directory offline
//	extauthz try [rls|authz] send one decision request to a running server
//	extauthz admin ...       call a running server's admin API
//	extauthz version         print the version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"syscall"
)

// version is set at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

const usage = `usage:
  extauthz [serve]         serve on one gRPC port Envoy's rate limit service (RLS v3), rate limit
                           quota service (RLQS v3), external authorization (ext_authz v3) and
                           external processing (ext_proc v3) APIs, gRPC health and reflection; on
                           the HTTP port /metrics, /healthz, /readyz, /healthcheck; configured by
                           EXTAUTHZ_* environment variables, or envoyproxy/ratelimit's when started
                           as ratelimit (see docs/reference.md)
  extauthz validate PATH   load the policy at PATH (file or directory), print every problem
  extauthz try [rls|authz] [flags] [DESCRIPTOR...]
                           send one ShouldRateLimit (default: the README's example) or ext_authz
                           Check request to a running server and print its answer (try -h)
  extauthz admin state|reset|explain|record ...
                           call a running server's admin API (EXTAUTHZ_ADMIN_ADDR): read or reset
                           rate-limit counters, explain a decision, get or delete an idempotency
                           record (admin -h)
  extauthz version         print the version
  extauthz help            print this text
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// The first signal starts the drain; a second one ends the process at
	// once (the default action), for an impatient Ctrl-C.
	context.AfterFunc(ctx, stop)
	code := runAs(ctx, os.Args[0], os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// runAs is run for the binary started as argv0. Started as ratelimit
// (Envoy Gateway's and AI Gateway's /bin/ratelimit) with arguments that
// name no command, it serves and logs them ignored: envoyproxy/ratelimit
// reads no arguments, and AI Gateway's Deployment passes its controller's
// flag (--quotaRateLimitServiceAddr) to it.
func runAs(ctx context.Context, argv0 string, args []string, stdout, stderr io.Writer) int {
	if path.Base(filepath.ToSlash(argv0)) == "ratelimit" && len(args) > 0 && !isCommand(args[0]) {
		return serveMain(ctx, stderr, fmt.Sprintf("arguments %q are ignored: envoyproxy/ratelimit reads none", args))
	}
	return run(ctx, args, stdout, stderr)
}

// isCommand reports whether arg names one of run's commands.
func isCommand(arg string) bool {
	switch arg {
	case "serve", "validate", "try", "admin", "version", "-version", "--version", "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// run executes one subcommand and returns the process exit code: 0 on
// success, 1 on failure, 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		if len(args) != 0 {
			return usageError(stderr, "serve takes no arguments, got %q", args[0])
		}
		return serveMain(ctx, stderr)
	case "validate":
		switch len(args) {
		case 0:
			return usageError(stderr, "validate needs a PATH (a policy file or directory)")
		case 1:
			return validateMain(args[0], stdout, stderr)
		}
		return usageError(stderr, "validate takes one PATH, got %d arguments", len(args))
	case "try":
		return tryMain(ctx, args, stdout, stderr)
	case "admin":
		return adminMain(ctx, args, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "extauthz %s\n", version)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	return usageError(stderr, "unknown command %q", cmd)
}

// usageError says in one line what was wrong with the command line, then
// prints the usage, and returns exit code 2.
func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "extauthz: "+format+"\n", args...)
	fmt.Fprint(stderr, usage)
	return 2
}
