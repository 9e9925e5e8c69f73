package container

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// stopGrace is the `docker run` flag docs/containers.md gives the
// container: a stop grace above EXTAUTHZ_DRAIN_DELAY +
// EXTAUTHZ_SHUTDOWN_TIMEOUT (10 s + 10 s), where Docker's default (10 s)
// would kill extauthz as its drain ends.
var stopGrace = []string{"--stop-timeout", "30"}

// TestImageStopDrains runs the shipped drain (the image's defaults) under
// load and stops the container with a plain `docker stop`: calls are still
// served after SIGTERM, every call started before the listener closed (the
// end of the drain delay, read from extauthz's log) gets an answer, and
// extauthz exits 0 before the grace period runs out.
func TestImageStopDrains(t *testing.T) {
	t.Parallel()
	c := runImage(t, append(append([]string{}, stopGrace...), lockedDown...))
	l := startRLSLoad(t, c.grpcAddr, 4)
	time.Sleep(500 * time.Millisecond) // the load runs before SIGTERM
	start := time.Now()
	l.sigterm.Store(start.UnixNano())
	mustDocker(t, "stop", c.id)
	took := time.Since(start)
	l.finish()

	if code := inspect(t, "{{.State.ExitCode}}", c.id); code != "0" {
		t.Errorf("exit code %s after docker stop (%v), want 0: killed before the drain ended", code, took.Round(time.Millisecond))
	}
	if took >= 30*time.Second {
		t.Errorf("docker stop took %v, the whole grace period", took)
	}
	closed := listenerClosed(t, c.id)
	var answered, afterSIGTERM, dropped, refused int
	var example error
	for _, call := range l.calls {
		switch {
		case call.err == nil:
			answered++
			if call.start.UnixNano() >= l.sigterm.Load() {
				afterSIGTERM++
			}
		case call.start.Before(closed):
			dropped++
			example = call.err
		default:
			refused++
		}
	}
	if afterSIGTERM == 0 {
		t.Error("no call was answered after SIGTERM: the drain delay did not keep serving")
	}
	if dropped > 0 {
		t.Errorf("%d calls started before the listener closed got no answer, e.g. %v", dropped, example)
	}
	t.Logf("docker stop took %v; %d calls answered, %d of them after SIGTERM; %d failed after the listener closed",
		took.Round(time.Millisecond), answered, afterSIGTERM, refused)
}

// listenerClosed reads from the container's log when extauthz stopped
// accepting (its "stopping" line). The container shares the host's clock.
func listenerClosed(t *testing.T, id string) time.Time {
	t.Helper()
	for _, line := range strings.Split(mustDocker(t, "logs", id), "\n") {
		var entry struct {
			Time time.Time `json:"time"`
			Msg  string    `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && strings.HasPrefix(entry.Msg, "stopping") {
			return entry.Time
		}
	}
	t.Fatal("extauthz logged no \"stopping\" line")
	return time.Time{}
}

// call is one ShouldRateLimit of the load.
type call struct {
	start time.Time
	err   error
}

// rlsLoad is workers calling ShouldRateLimit in a loop, one connection
// each, recording every call.
type rlsLoad struct {
	sigterm atomic.Int64 // UnixNano when docker stop was sent
	done    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	calls   []call
}

func startRLSLoad(t *testing.T, addr string, workers int) *rlsLoad {
	t.Helper()
	l := &rlsLoad{done: make(chan struct{})}
	l.sigterm.Store(1 << 62)
	for i := range workers {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		l.wg.Add(1)
		go l.work(rlsv3.NewRateLimitServiceClient(conn), fmt.Sprintf("load-%d", i))
	}
	return l
}

func (l *rlsLoad) work(client rlsv3.RateLimitServiceClient, tenant string) {
	defer l.wg.Done()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrlv3.RateLimitDescriptor{{
		Entries: []*commonrlv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}, {Key: "route", Value: "default"}},
	}}}
	for {
		select {
		case <-l.done:
			return
		default:
		}
		c := call{start: time.Now()}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, c.err = client.ShouldRateLimit(ctx, req)
		cancel()
		l.mu.Lock()
		l.calls = append(l.calls, c)
		l.mu.Unlock()
		if c.err != nil {
			time.Sleep(10 * time.Millisecond) // the server is gone: no busy loop
		}
	}
}

func (l *rlsLoad) finish() {
	close(l.done)
	l.wg.Wait()
}
