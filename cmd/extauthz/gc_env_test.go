package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runBinaryWithin is runBinary for a process that may wrongly serve
// instead of exiting: it is killed after d (exit code -1).
func runBinaryWithin(t *testing.T, d time.Duration, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// TestBadGOGCStopsWithOneLine: a GOGC the Go runtime would silently
// replace by its default of 100 stops the binary like any other bad
// setting: exit 2, one line naming it, beside the other settings' lines.
func TestBadGOGCStopsWithOneLine(t *testing.T) {
	t.Parallel()
	const want = "want off, or a whole percentage such as 100 (unset: extauthz's 400)"
	for _, c := range []struct {
		env   []string
		lines []string // after "extauthz: "
	}{
		{[]string{"GOGC=abc"}, []string{`GOGC="abc": ` + want}},
		{[]string{"GOGC=1.5"}, []string{`GOGC="1.5": ` + want}},
		{[]string{"GOGC=+50"}, []string{`GOGC="+50": ` + want}},
		{[]string{"GOGC= 100"}, []string{`GOGC=" 100": ` + want}},
		{[]string{"GOGC=Off"}, []string{`GOGC="Off": ` + want}},
		{[]string{"GOGC=99999999999"}, []string{`GOGC="99999999999": ` + want}},
		{[]string{"GOGC=abc", "EXTAUTHZ_REDIS_POOL_SIZE=many"}, []string{
			`EXTAUTHZ_REDIS_POOL_SIZE="many": not an integer; want 0 (go-redis's default, 10 per CPU) to 10000`,
			`GOGC="abc": ` + want}},
	} {
		t.Run(strings.Join(c.env, " "), func(t *testing.T) {
			t.Parallel()
			env := append([]string{"EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0"}, c.env...)
			code, stdout, stderr := runBinaryWithin(t, 20*time.Second, env)
			wantErr := "extauthz: " + strings.Join(c.lines, "\nextauthz: ") + "\n"
			if code != 2 || stderr != wantErr || stdout != "" {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, wantErr)
			}
		})
	}
}

// TestGOGCValuesTheRuntimeTakes: what the Go runtime honours is accepted.
func TestGOGCValuesTheRuntimeTakes(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"off", "0", "50", "100", "400", "-1", "2147483647"} {
		if err := goRuntimeEnvErrors(func(k string) (string, bool) { return v, k == "GOGC" }); err != nil {
			t.Errorf("GOGC=%s: %v", v, err)
		}
	}
	if err := goRuntimeEnvErrors(func(string) (string, bool) { return "", false }); err != nil {
		t.Errorf("unset: %v", err)
	}
}

// TestBadGOMEMLIMITDiesInTheRuntime pins what no code of ours can change:
// the Go runtime parses GOMEMLIMIT while it starts, before main or any
// init, and throws on a bad value. It exits 2 (as a bad setting does) and
// its first two lines name the variable, then a runtime stack trace
// follows (docs: README's GOMEMLIMIT row). Should a Go release stop doing
// this, this test fails, and the variable joins goRuntimeEnvErrors.
func TestBadGOMEMLIMITDiesInTheRuntime(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"bogus", "1.5GiB", "-1", "512MB"} {
		for _, args := range [][]string{nil, {"validate", "../../examples/policy"}, {"version"}} {
			code, stdout, stderr := runBinary(t, []string{"GOMEMLIMIT=" + v, "EXTAUTHZ_GRPC_ADDR=127.0.0.1:0", "EXTAUTHZ_HTTP_ADDR=127.0.0.1:0"}, args...)
			want := "GOMEMLIMIT=" + v + "\nfatal error: malformed GOMEMLIMIT; see `go doc runtime/debug.SetMemoryLimit`\n"
			if code != 2 || !strings.HasPrefix(stderr, want) || stdout != "" {
				t.Errorf("GOMEMLIMIT=%s %v: exit %d, stderr %q; want exit 2 and stderr starting %q", v, args, code, stderr, want)
			}
		}
	}
}
