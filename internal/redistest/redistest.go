// Package redistest starts real redis-server processes for tests: a
// standalone server or a three-master Redis Cluster, each on free loopback
// ports with its files in t.TempDir(). Nothing here talks to a Redis the test
// did not start (never 6379).
//
// When redis-server is not installed the test is skipped, or fails when the
// environment variable CI is "true" (a missing dependency must not turn a CI
// run green). REDIS_SERVER_BIN and REDIS_CLI_BIN override the binaries found
// on PATH.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is one redis-server process on a loopback port. Stop and Start
// restart it on the same port, which restart tests need: clients keep their
// address and reconnect by themselves.
type Server struct {
	// Addr is host:port, e.g. 127.0.0.1:23456.
	Addr string
	// URL is redis://Addr, accepted by redis.ParseURL.
	URL string

	tb    testing.TB
	bin   string
	dir   string
	port  int
	extra []string

	// tlsFiles, when set, serve TLS only (see StandaloneTLS).
	tlsFiles *tlsFiles
	// password, when set, is the server's requirepass (see NewSentinel).
	password string

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{}
}

// Standalone starts a standalone redis-server (no persistence) and stops it
// when the test ends.
func Standalone(tb testing.TB) *Server {
	tb.Helper()
	s := newServer(tb, findBin(tb, "REDIS_SERVER_BIN", "redis-server"), nil)
	tb.Cleanup(s.Stop)
	return s
}

// StandaloneAOF starts a standalone redis-server that persists with an
// append-only file fsynced every second (appendfsync everysec), the
// setting docs/redis.md recommends; Kill then Start replays it, as a
// crashed and restarted Redis would.
func StandaloneAOF(tb testing.TB) *Server {
	tb.Helper()
	s := newServer(tb, findBin(tb, "REDIS_SERVER_BIN", "redis-server"),
		[]string{"--appendonly", "yes", "--appendfsync", "everysec"})
	tb.Cleanup(s.Stop)
	return s
}

// newServer starts a server in its own directory on a free port pair (the
// cluster bus needs port+10000 too), retrying when another process grabbed
// the port in between.
func newServer(tb testing.TB, bin string, extra []string) *Server {
	tb.Helper()
	return newServerTLS(tb, bin, extra, nil, "")
}

// newServerTLS starts a server as newServer does, serving TLS only when tf
// is set; password, when set, must match a --requirepass in extra.
func newServerTLS(tb testing.TB, bin string, extra []string, tf *tlsFiles, password string) *Server {
	tb.Helper()
	dir := tb.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s := &Server{
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			tb:   tb, bin: bin, dir: dir, port: port, extra: extra, tlsFiles: tf, password: password,
		}
		s.URL = "redis://" + s.Addr
		if tf != nil {
			s.URL = "rediss://" + s.Addr
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// Start starts a stopped server again on the same port; it is a no-op when
// the server runs.
func (s *Server) Start() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart redis-server on %s: %v", s.Addr, err)
	}
}

// Stop terminates the server and waits for it to exit; safe to call twice.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Signal(syscall.SIGCONT) // a paused server cannot exit
	stopProcess(s.proc, s.done)
	s.proc, s.done = nil, nil
}

// Pause freezes the server (SIGSTOP): connections stay open but nothing is
// answered, which is how a slow or hung Redis looks to clients. Resume, or
// the test's cleanup, lets it run again.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Kill ends the server at once (SIGKILL), as a crash would: nothing is
// written, clients see their connections reset. Start brings it back.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Kill()
	<-s.done
	s.proc, s.done = nil, nil
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		_ = s.proc.Process.Signal(sig)
	}
}

// Client returns a new client of this server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password, TLSConfig: s.tlsFiles.clientConfig()})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	logFile := filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port))
	args := append(s.tlsFiles.portArgs(s.port), []string{
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", logFile,
	}...)
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if err := waitPing(&redis.Options{Addr: s.Addr, Password: s.password, TLSConfig: s.tlsFiles.clientConfig()}, done); err != nil {
		stopProcess(cmd, done)
		return fmt.Errorf("%w; log: %s", err, tail(logFile))
	}
	s.proc, s.done = cmd, done
	return nil
}

// waitPing polls the server o names until it answers PING, it exits, or
// time runs out.
func waitPing(o *redis.Options, exited <-chan struct{}) error {
	o.MaxRetries, o.DialTimeout = -1, 200*time.Millisecond
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG within %s: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopProcess asks the process to exit and kills it if it does not.
func stopProcess(cmd *exec.Cmd, done <-chan struct{}) {
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// freePort finds a loopback port p such that p and p+10000 (the cluster bus
// port) are both free right now.
func freePort() (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port == 6379 || port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, fmt.Errorf("no free port pair found")
}

// findBin locates a binary by environment override or PATH; a missing one
// skips the test, or fails it under CI=true.
func findBin(tb testing.TB, env, name string) string {
	tb.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("redistest: %s not found (install the redis-server package or set %s): %v", name, env, err)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

// tail returns the last lines of a log file for error messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}
