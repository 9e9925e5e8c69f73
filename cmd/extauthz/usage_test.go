package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUsageErrorsSayWhatWasWrong: a bad command line gets one line saying
// what was wrong, then the usage, and exit 2.
func TestUsageErrorsSayWhatWasWrong(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"validate"}, "extauthz: validate needs a PATH (a policy file or directory)"},
		{[]string{"validate", "a.yaml", "b.yaml"}, `extauthz: validate takes one PATH, got 2 arguments`},
		{[]string{"frobnicate"}, `extauthz: unknown command "frobnicate"`},
		{[]string{"serve", "now"}, `extauthz: serve takes no arguments, got "now"`},
	} {
		var stdout, stderr strings.Builder
		code := run(context.Background(), c.args, &stdout, &stderr)
		first, rest, _ := strings.Cut(stderr.String(), "\n")
		if code != 2 || first != c.line || rest != usage || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stderr %q; want 2, %q, then the usage", c.args, code, stderr.String(), c.line)
		}
	}
}

// TestValidateChecksItsVariablesAsServeDoes: a bad value of a variable
// validate reads stops it with the very lines serve prints for it (exit
// 2), instead of being replaced by a default.
func TestValidateChecksItsVariablesAsServeDoes(t *testing.T) {
	t.Parallel()
	for _, env := range [][]string{
		{"EXTAUTHZ_GRPC_MAX_SEND_BYTES=12"},
		{"EXTAUTHZ_GRPC_MAX_RECV_BYTES=lots"},
		{"EXTAUTHZ_MERGE_DOMAINS=perhaps"},
		{"EXTAUTHZ_BLOB_S3_LIFECYCLE_DAYS=-1", "EXTAUTHZ_BLOB_S3_BUCKET=b"},
		{"EXTAUTHZ_GRPC_MAX_SEND_BYTES=12", "GOGC=abc"},
	} {
		env := append([]string{"EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0"}, env...)
		serveCode, _, serveErr := runBinaryWithin(t, 20*time.Second, env)
		code, stdout, stderr := runBinaryWithin(t, 20*time.Second, env, "validate", examplePolicy(t))
		if serveCode != 2 || !strings.HasPrefix(serveErr, "extauthz: ") {
			t.Fatalf("%v: serve exit %d, stderr %q; the case does not break a rule", env, serveCode, serveErr)
		}
		if code != 2 || stderr != serveErr || stdout != "" {
			t.Errorf("%v: validate exit %d, stderr %q, stdout %q; want 2 and serve's %q", env, code, stderr, stdout, serveErr)
		}
	}
}
