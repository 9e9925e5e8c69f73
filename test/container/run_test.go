package container

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// lockedDown are the `docker run` flags of a production cluster's security
// context: a read-only root filesystem, every capability dropped, no
// privilege escalation. The image must serve under them as it is.
var lockedDown = []string{"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}

// containers numbers the containers of this test run.
var containers atomic.Int64

// ctr is one running container of the image, its ports published on
// loopback.
type ctr struct {
	// id is the container's name.
	id string
	// grpcAddr and httpAddr are the host addresses of its gRPC and HTTP
	// ports (9001 and 9090 unless runImageOn says otherwise).
	grpcAddr, httpAddr string
}

// runImage starts the image with flags (before the image name) and args
// (after it), removes it when the test ends (printing its log if the test
// failed), and waits until its /readyz answers 200.
func runImage(t *testing.T, flags []string, args ...string) *ctr {
	t.Helper()
	return runImageOn(t, "9001", "9090", "/readyz", flags, args...)
}

// runImageOn is runImage for a container listening on grpcPort and
// httpPort (as /bin/ratelimit does, on the peer's 8081 and 8080), ready
// when readyPath answers 200.
func runImageOn(t *testing.T, grpcPort, httpPort, readyPath string, flags []string, args ...string) *ctr {
	t.Helper()
	needImage(t)
	// Named, and removed by that name, so that a container created but
	// failing to start is removed too.
	c := &ctr{id: fmt.Sprintf("extauthz-test-%d-%d", os.Getpid(), containers.Add(1))}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := docker(context.Background(), "logs", "--tail", "60", c.id)
			t.Logf("container log:\n%s", out)
		}
		_, _ = docker(context.Background(), "rm", "-f", c.id)
	})
	run := append([]string{"run", "-d", "--name", c.id, "-p", "127.0.0.1::" + grpcPort, "-p", "127.0.0.1::" + httpPort}, flags...)
	mustDocker(t, append(append(run, image.name), args...)...)
	c.grpcAddr = hostPort(t, c.id, grpcPort+"/tcp")
	c.httpAddr = hostPort(t, c.id, httpPort+"/tcp")
	if err := waitContainerOK(c.id, "http://"+c.httpAddr+readyPath, 60*time.Second); err != nil {
		t.Fatalf("container %s: %v", c.id, err)
	}
	return c
}

// hostPort is the loopback address a container port is published on.
func hostPort(t *testing.T, id, port string) string {
	t.Helper()
	out := mustDocker(t, "port", id, port)
	addr, _, _ := strings.Cut(out, "\n")
	return strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1)
}

var probe = &http.Client{Timeout: 2 * time.Second}

// waitContainerOK is waitOK for a container's own endpoint: it gives up
// as soon as the container has stopped (a port lost to another test, a
// refused setting) instead of polling a dead address until timeout.
func waitContainerOK(id, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for i := 1; ; i++ {
		err := getOK(url)
		if err == nil {
			return nil
		}
		if i%10 == 0 && !containerRunning(id) { // about once a second
			return fmt.Errorf("container %s stopped before %s answered 200: %w", id, url, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %v for 200 from %s: %w", timeout, url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// containerRunning reports whether the engine says id is running; an
// engine that cannot be asked counts as running (the deadline decides).
func containerRunning(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := docker(ctx, "inspect", "-f", "{{.State.Running}}", id)
	return err != nil || out != "false"
}

// waitOK polls url until it answers 200 or timeout passes.
func waitOK(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := getOK(url)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting %v for 200 from %s: %w", timeout, url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func getOK(url string) error {
	resp, err := probe.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// inspect reads one Go template field of a container or image.
func inspect(t *testing.T, format, id string) string {
	t.Helper()
	return mustDocker(t, "inspect", "--format", format, id)
}
