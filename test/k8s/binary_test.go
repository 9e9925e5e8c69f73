package k8s

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

const buildVersion = "v0.0.0-k8s-test"

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// dockerBinary builds cmd/extauthz once, with exactly the environment and
// arguments of the Dockerfile's go build (read from it, not copied), for
// this machine's GOOS/GOARCH in place of TARGETOS/TARGETARCH.
func dockerBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		b := dockerGoBuild(t, dockerfile(t), map[string]string{
			"VERSION": buildVersion, "TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH,
		})
		if buildDir, buildErr = os.MkdirTemp("", "extauthz-docker-build"); buildErr != nil {
			return
		}
		builtPath = filepath.Join(buildDir, "extauthz")
		args := append([]string{"build"}, b.Args...)
		for i, a := range args {
			if a == "-o" {
				args[i+1] = builtPath
			}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot(t) // the Dockerfile's WORKDIR holds the whole context
		// The image's build context has no .git (.dockerignore), so no VCS
		// stamping there; -buildvcs=false is the same here. Nothing else of
		// the caller's Go settings leaks in.
		cmd.Env = append(filterEnv(os.Environ(), "GOFLAGS", "CGO_ENABLED", "GOOS", "GOARCH"), "GOFLAGS=-buildvcs=false")
		for k, v := range b.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtPath
}

// filterEnv drops the named variables (and every EXTAUTHZ_ one) from env.
func filterEnv(env []string, names ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, envPrefix) && !hasPrefixAny(k+"=", suffixAll(names, "=")...) {
			out = append(out, kv)
		}
	}
	return out
}

func suffixAll(ss []string, suffix string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s + suffix
	}
	return out
}

// TestDockerBuildBinary: the Dockerfile's flags give a static binary with
// the version injected, no local paths and cgo off.
func TestDockerBuildBinary(t *testing.T) {
	t.Parallel()
	bin := dockerBinary(t)
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings %v: want CGO_ENABLED=0 and -trimpath", settings)
	}
	// With -trimpath, go does not record -ldflags; the version subcommand
	// shows whether -X main.version took effect.
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), buildVersion) {
		t.Errorf("extauthz version: %q, %v; want %s (is main.version the variable's name?)", out, err, buildVersion)
	}
	if runtime.GOOS == "linux" {
		checkStatic(t, bin)
	}
	// The policies the image and the ConfigMap ship must load.
	for _, dir := range []string{"examples/policy", policyDir} {
		out, err := exec.Command(bin, "validate", filepath.Join(repoRoot(t), dir)).CombinedOutput()
		if err != nil {
			t.Errorf("extauthz validate %s: %v\n%s", dir, err, out)
		}
	}
}

// checkStatic: no dynamic loader, no shared libraries, or the binary could
// not run on distroless static.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (%s)", p.Type)
		}
	}
}

// freeAddr returns a loopback address with a port free at the time of the
// call.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer collects a child's output for the failure message.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process is a running extauthz.
type process struct {
	cmd      *exec.Cmd
	out      *syncBuffer
	grpcAddr string
	httpAddr string
	done     chan error // receives Wait's result once
	exited   bool       // done was received from
	waitErr  error
}

// wait reports whether the process exited within d, and how.
func (p *process) wait(d time.Duration) (exited bool, err error) {
	if p.exited {
		return true, p.waitErr
	}
	select {
	case p.waitErr = <-p.done:
		p.exited = true
		return true, p.waitErr
	case <-time.After(d):
		return false, nil
	}
}

// start runs bin with env (NAME=value) plus loopback addresses on free
// ports, and stops it (SIGKILL) at the end of the test if still running.
func start(t *testing.T, bin string, env []string) *process {
	t.Helper()
	p := &process{out: &syncBuffer{}, grpcAddr: freeAddr(t), httpAddr: freeAddr(t), done: make(chan error, 1)}
	p.cmd = exec.CommandContext(context.Background(), bin)
	p.cmd.Env = append(filterEnv(os.Environ()), env...)
	p.cmd.Env = append(p.cmd.Env, "EXTAUTHZ_GRPC_ADDR="+p.grpcAddr, "EXTAUTHZ_HTTP_ADDR="+p.httpAddr)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.exited {
			_ = p.cmd.Process.Kill()
			p.wait(time.Minute)
		}
		if t.Failed() {
			t.Logf("extauthz output:\n%s", p.out.String())
		}
	})
	return p
}
