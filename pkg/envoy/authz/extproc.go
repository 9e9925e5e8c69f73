package authz

import (
	"context"
	"errors"
	"io"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// ExtProc serves envoy.service.ext_proc.v3.ExternalProcessor for the
// Idempotency-Key lifecycle. One stream is one HTTP request; the server
// keeps it open until the response phase. It supports both wirings of
// docs/idempotency.md, told apart per stream:
//
//   - wiring (b), ext_authz + ext_proc: the request carries ext_authz's
//     handoff in metadata_context (forwarded namespace envoy.ExtAuthzNamespace).
//     Action "lease": the stream renews the lease while the upstream works
//     and settles it on the response. Action "replay": the stream answers
//     the stored response (binary-safe) on the request headers.
//   - wiring (a), ext_proc alone: no handoff and the request body mode is
//     BUFFERED (protocol_config, or a request body arriving). The stream
//     validates the key on the request headers (400), takes the decision
//     on the whole body (409, 422, replay via ImmediateResponse, or proceed
//     holding a lease), and settles the lease on the response.
//
// Settling the lease on the response (DESIGN §4, the settle table of
// docs/idempotency.md): exactly once, a lease is Released only when the
// upstream certainly did not act — an Envoy local reply whose
// response.flags say the request never reached an upstream (UF, UH, UO,
// NR, NC, DF, or a later filter's RL, UAEX, RLSE, FI) — or when a real
// upstream reply (response.code_details via_upstream) has a status the
// route does not store. A real reply with a stored status is Complete'd
// once its whole body arrived (inline up to max_body_bytes, else through
// the optional blob store up to max_stored_body_bytes). Every other
// outcome — upstream timeout, reset, client gone, ext_proc timeout, a reply
// too large to keep — completes the key as not replayable: the upstream
// may have acted, so a retry is told so (409) and never runs again.
type ExtProc struct {
	extprocv3.UnimplementedExternalProcessorServer

	gate     gate
	policies envoy.PolicySource
	metrics  *envoy.Metrics
	opts     idemOptions
	charges  *charger
}

// NewExtProc returns an ExtProc keeping idempotency records in idem under
// the policies' current snapshot. events counts idempotency outcomes;
// metrics times each message.
func NewExtProc(idem idempotency.Store, policies envoy.PolicySource, metrics *envoy.Metrics, events *IdempotencyMetrics, opts ...IdempotencyOption) (*ExtProc, error) {
	switch {
	case envoy.IsNil(idem):
		return nil, errors.New("envoy: NewExtProc: nil idempotency store")
	case envoy.IsNil(policies):
		return nil, errors.New("envoy: NewExtProc: nil policy source")
	case metrics == nil || events == nil:
		return nil, errors.New("envoy: NewExtProc: nil metrics")
	}
	o := newIdemOptions(opts)
	events.syncRoutes(httpPolicy(policies.Current()))
	charges := o.charger(nil)
	charges.metrics.syncPolicy(httpPolicy(policies.Current()))
	return &ExtProc{gate: gate{store: idem, events: events, timeout: o.storeTimeout, replay: o.replay, latency: o.latency}, policies: policies, metrics: metrics, opts: o, charges: charges}, nil
}

// Register registers the server on r (a *grpc.Server).
func (s *ExtProc) Register(r grpc.ServiceRegistrar) {
	extprocv3.RegisterExternalProcessorServer(r, s)
}

// Process handles one HTTP request's stream: one reply per message, until
// Envoy closes the stream. A stream that ends before the response settled
// a held lease completes it as not replayable (finish): the request may
// have reached the upstream, so a retry must never run it again.
func (s *ExtProc) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	st := newProcStream(stream.Context(), s)
	defer st.finish()
	for {
		req, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF), status.Code(err) == codes.Canceled, errors.Is(err, context.Canceled):
			return nil
		case err != nil:
			return err
		}
		start := time.Now()
		resp, err := st.handle(req)
		s.metrics.Latency(envoy.APIExtProc, time.Since(start))
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}
