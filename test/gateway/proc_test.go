package gateway

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is one child process whose output goes to a log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startProc starts bin with args and env (added to the test's); output
// goes to dir/name.log. The process is stopped when the test ends.
func startProc(t *testing.T, dir, name, bin string, args, env []string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(15 * time.Second)
		if dump := os.Getenv("EG_DUMP_DIR"); dump != "" {
			if b, err := os.ReadFile(logPath); err == nil {
				_ = os.WriteFile(filepath.Join(dump, name+".log"), b, 0o644)
			}
		}
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", name, logPath, p.tail(60))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits, killing the process after grace.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitUntil polls cond every 100ms until it holds, failing after timeout
// with the processes' logs.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("waiting for %s: %s exited:\n%s", what, p.name, p.tail(60))
			}
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range procs {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", p.name, p.tail(40))
			}
			t.Fatalf("%s: not within %s\n%s", what, timeout, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
