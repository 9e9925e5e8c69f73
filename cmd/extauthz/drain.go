package main

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// healthServer is grpc-go's health server whose Watch streams end when
// stopping is closed. GracefulStop waits for every open stream, and a Watch
// never ends by itself: without this one watching client would hold the
// shutdown until EXTAUTHZ_SHUTDOWN_TIMEOUT cut every call.
type healthServer struct {
	*health.Server
	stopping chan struct{}
}

func newHealthServer() *healthServer {
	return &healthServer{Server: health.NewServer(), stopping: make(chan struct{})}
}

// Watch serves grpc.health.v1 Watch (the NOT_SERVING of a drain reaches the
// watcher at once) and ends the stream with UNAVAILABLE when the server
// stops accepting, so that the client reconnects elsewhere.
func (h *healthServer) Watch(in *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.Server.Watch(in, &watchStream{Health_WatchServer: stream, ctx: ctx})
	select {
	case <-h.stopping:
		return status.Error(codes.Unavailable, "server stopping")
	default:
		return err
	}
}

// stop ends every Watch stream, now and to come.
func (h *healthServer) stop() { close(h.stopping) }

// watchStream is a Watch stream with a context that also ends on stop.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w *watchStream) Context() context.Context { return w.ctx }

// shutdown takes the replica out of rotation without failing a call:
//
//  1. at once: gRPC health NOT_SERVING (Check and Watch, every service) and
//     /readyz 503, while every API, and the gRPC listener, keep serving;
//  2. after the drain delay, long enough for Envoy's active health checks
//     (interval × unhealthy_threshold) and endpoint removal to move the
//     traffic elsewhere: stop accepting, send GOAWAY and let in-flight calls
//     finish (GracefulStop) for at most the shutdown timeout, then cut them;
//  3. stop the HTTP server and the replay endpoint.
//
// skipDelay (a server already failed) goes straight to step 2.
func (s *server) shutdown(skipDelay bool) {
	s.draining.Store(true)
	s.health.Shutdown()
	if !skipDelay && s.drainDelay > 0 {
		s.log.Info("draining: health NOT_SERVING, still serving", "drain_delay", s.drainDelay)
		time.Sleep(s.drainDelay)
	}
	s.log.Info("stopping: no new connections, finishing in-flight calls", "shutdown_timeout", s.timeout)
	deadline := time.Now().Add(s.timeout)
	drained := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(drained)
	}()
	// GracefulStop closes the listener first, then waits for the open
	// streams, Watch streams included. Ending the Watches only once the
	// listener is closed means a client told UNAVAILABLE can no longer
	// connect here again.
	if s.grpcLn != nil {
		select {
		case <-s.grpcLn.closed:
		case <-time.After(time.Second):
		}
	}
	s.health.stop()
	select {
	case <-drained:
	case <-time.After(time.Until(deadline)):
		s.log.Warn("shutdown timeout: cutting in-flight calls", "timeout", s.timeout)
		s.grpc.Stop()
		<-drained
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Second))
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		s.http.Close()
	}
	if s.replay != nil { // replays in flight finish within the same deadline
		if err := s.replay.Shutdown(ctx); err != nil {
			s.replay.Close()
		}
	}
}

// notifyListener is a listener that says when it has been closed.
type notifyListener struct {
	net.Listener
	once   sync.Once
	closed chan struct{}
}

func newNotifyListener(l net.Listener) *notifyListener {
	return &notifyListener{Listener: l, closed: make(chan struct{})}
}

// Close closes the listener and, the first time, the closed channel.
func (l *notifyListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}
