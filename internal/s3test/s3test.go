// Package s3test starts a real S3-compatible server for tests: moto's
// standalone server (moto_server, from PyPI's moto[server]) on a free
// loopback port, and makes a fresh bucket per test in it.
//
// The binary is found through MOTO_SERVER, then PATH, then the project-local
// venv that scripts/test-deps.sh creates (<module root>/.cache/moto-venv/bin/moto_server). When
// none exists the test is skipped, or fails when the environment variable
// CI is "true" (a missing dependency must not turn a CI run green).
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Static credentials moto accepts (it accepts any); tests of the
// environment chain export the same values.
const (
	AccessKeyID     = "extauthz-test"
	SecretAccessKey = "extauthz-test-secret"
	Region          = "us-east-1"
)

// startTimeout bounds how long moto_server may take to answer HTTP (a
// Python start-up on a loaded machine takes seconds).
const startTimeout = 60 * time.Second

// Server is one moto_server process. Stop and Start restart it on the same
// port (its state, held in memory, is lost), for storage-down tests.
type Server struct {
	// Endpoint is the server's URL, e.g. http://127.0.0.1:45123.
	Endpoint string

	bin  string
	port int
	log  string

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{}
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns one server for the whole test binary, started on first use
// and killed with the binary. Tests isolate themselves with NewBucket.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	bin := findBin(tb)
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "s3test-")
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = start(bin, dir)
	})
	if sharedErr != nil {
		tb.Fatalf("s3test: %v", sharedErr)
	}
	return shared
}

// Start starts a server owned by the test, stopped when it ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start(findBin(tb), tb.TempDir())
	if err != nil {
		tb.Fatalf("s3test: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start(bin, dir string) (*Server, error) {
	var lastErr error
	for i := 0; i < 5; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{bin: bin, port: port, log: filepath.Join(dir, "moto.log"),
			Endpoint: "http://127.0.0.1:" + strconv.Itoa(port)}
		if lastErr = s.Start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Start (re)starts the process on the server's port and waits until it
// answers.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "-H", "127.0.0.1", "-p", strconv.Itoa(s.port))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	s.proc, s.done = cmd, done
	if err := waitHTTP(s.Endpoint, done); err != nil {
		s.stopLocked()
		b, _ := os.ReadFile(s.log)
		return fmt.Errorf("%s on port %d: %w\n%s", s.bin, s.port, err, b)
	}
	return nil
}

// Stop kills the process; the port stays reserved for Start.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
}

func (s *Server) stopLocked() {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Kill()
	<-s.done
	s.proc, s.done = nil, nil
}

// Client returns an S3 client for the server (static test credentials,
// path-style addressing).
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, ""),
		// The SDK's default CRC trailers are not needed against a test server.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// NewBucket creates a bucket with a random name and returns the name.
func (s *Server) NewBucket(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name}); err != nil {
		tb.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

// waitHTTP polls the endpoint until it answers or the process exits.
func waitHTTP(endpoint string, exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("exited before answering")
		default:
		}
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no answer after %s", startTimeout)
}

// freePort returns a loopback port that is free right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// findBin locates moto_server; a missing one skips the test, or fails it
// under CI=true.
func findBin(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("MOTO_SERVER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("moto_server"); err == nil {
		return p
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".cache", "moto-venv", "bin", "moto_server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := "s3test: moto_server not found (run make test, pip install 'moto[server]', or set MOTO_SERVER)"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
	return ""
}

// moduleRoot walks up from the working directory (a test runs in its
// package's directory) to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found")
		}
		dir = parent
	}
}
