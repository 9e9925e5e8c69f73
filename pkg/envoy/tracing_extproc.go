package envoy

import (
	"context"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// StreamInterceptor traces Process with one span per stream: one HTTP
// request, from its request headers to the end of its response, with an
// event per message (request_headers, response_body, ...). One span, not
// one per message, because the store calls of a stream (Begin, Renew while
// the upstream works, Complete or Release) are one lease's life and read
// best side by side; the span's length is the HTTP request's, and the time
// spent per message is in extauthz_decision_duration_seconds.
//
// The parent is in the stream's metadata or in the first message's request
// headers, so the interceptor reads that message before the handler runs
// and hands it over as the handler's first Recv. Other streams (health
// Watch, reflection) pass untouched.
func (t *Tracing) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod != extprocv3.ExternalProcessor_Process_FullMethodName {
			return handler(srv, ss)
		}
		return t.process(srv, ss, handler)
	}
}

func (t *Tracing) process(srv any, ss grpc.ServerStream, handler grpc.StreamHandler) error {
	begun := time.Now()
	first := new(extprocv3.ProcessingRequest)
	firstErr := ss.RecvMsg(first)
	var headers propagation.TextMapCarrier
	if hm := first.GetRequestHeaders().GetHeaders(); hm != nil {
		headers = protoHeaderCarrier{hm}
	}
	// The span starts with the stream, not with its first message.
	ctx, span := t.start(ss.Context(), SpanProcess, APIExtProc, headers, trace.WithTimestamp(begun))
	defer span.End()
	ts := &tracedStream{ServerStream: ss, ctx: ctx, span: span, first: first, firstErr: firstErr, pending: true}
	err := handler(srv, ts)
	if span.IsRecording() {
		outcome := OutcomeContinue
		if ts.immediate != 0 {
			outcome = OutcomeImmediate
			span.SetAttributes(semconv.HTTPResponseStatusCode(ts.immediate))
		}
		finish(span, outcome, err)
	}
	return err
}

// tracedStream is a Process stream whose context holds the span, whose
// first Recv returns the message the interceptor read, and which notes
// each message on the span.
type tracedStream struct {
	grpc.ServerStream
	ctx       context.Context
	span      trace.Span
	first     *extprocv3.ProcessingRequest
	firstErr  error
	pending   bool // first not handed over yet
	immediate int  // status of an ImmediateResponse sent, if any
}

func (s *tracedStream) Context() context.Context { return s.ctx }

func (s *tracedStream) RecvMsg(m any) error {
	if s.pending {
		s.pending = false
		if s.firstErr != nil {
			return s.firstErr
		}
		dst, ok := m.(proto.Message)
		if !ok {
			return status.Errorf(codes.Internal, "ext_proc tracing: cannot hand %T over as %T", s.first, m)
		}
		proto.Merge(dst, s.first)
		s.event(s.first)
		return nil
	}
	err := s.ServerStream.RecvMsg(m)
	if r, ok := m.(*extprocv3.ProcessingRequest); ok && err == nil {
		s.event(r)
	}
	return err
}

func (s *tracedStream) SendMsg(m any) error {
	if r, ok := m.(*extprocv3.ProcessingResponse); ok && r.GetImmediateResponse() != nil {
		s.immediate = int(r.GetImmediateResponse().GetStatus().GetCode())
	}
	return s.ServerStream.SendMsg(m)
}

// event notes a message's phase on the span.
func (s *tracedStream) event(r *extprocv3.ProcessingRequest) {
	if s.span.IsRecording() {
		s.span.AddEvent(phaseName(r))
	}
}

// phaseName names the phase of a message.
func phaseName(r *extprocv3.ProcessingRequest) string {
	switch r.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return "request_trailers"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		return "response_body"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return "response_trailers"
	}
	return "unknown"
}
