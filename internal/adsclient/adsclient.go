// Package adsclient is a state-of-the-world xDS client for one resource
// type over the Aggregated Discovery Service, as envoyproxy/ratelimit takes
// its RateLimitConfig resources from Envoy Gateway's controller. It only
// delivers: each response goes to an Apply callback, whose verdict the
// client reports back to the server (ACK, or NACK with the error's text as
// error_detail). It reconnects with backoff until its context ends.
package adsclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
)

// Config configures a Client. Target, Node, TypeURL and Apply are required.
type Config struct {
	// Target is the server's host:port.
	Target string
	// Node identifies this client (id, cluster, metadata); the server picks
	// the snapshot by it. Sent on the first request of every stream.
	Node *corev3.Node
	// TypeURL is the one resource type subscribed to (wildcard: all
	// resources of the type, so each response is the whole state).
	TypeURL string
	// Credentials secure the connection; nil is plaintext.
	Credentials credentials.TransportCredentials
	// Headers are sent as gRPC metadata on every stream (a server's
	// authentication token, say); optional.
	Headers map[string]string
	// MaxRecvBytes bounds one response; 0 is gRPC's default (4 MiB).
	MaxRecvBytes int
	// MinBackoff and MaxBackoff bound the pause before reconnecting, which
	// doubles after each failed stream (with jitter) and starts over after
	// a stream that delivered a response. Defaults 500ms and 30s. The same
	// pause, up to maxRefusedPause, paces the answers to a server that
	// resends a version the client refused.
	MinBackoff, MaxBackoff time.Duration
	// Apply takes one response's version and resources. nil means they now
	// serve (ACK); an error means they were refused and what served before
	// serves on (NACK carrying the error's text).
	Apply func(version string, resources []*anypb.Any) error
	// OnStreamError, optional, hears why a stream ended and how long the
	// client waits before the next one.
	OnStreamError func(err error, retryIn time.Duration)
}

// Client follows one resource type from one server.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
	// acked is the version last applied, sent on each new stream so that
	// a server that still has it need not resend.
	acked string
	// refused is the last response Apply refused, nil after one it took.
	refused *refusal
}

// maxRefusedPause bounds the pause before answering a resent refused
// version: also how late, at worst, the next good version is taken (the
// server sends it only once answered).
const maxRefusedPause = 5 * time.Second

// refusal is a refused response, by content: go-control-plane's snapshot
// cache (Envoy Gateway's controller) answers a NACK, which names the last
// good version, with the refused snapshot again at once, so the two sides
// would loop as fast as the network allows, validating, logging and
// counting it every time. A resend is answered with the same NACK, without
// Apply, after a pause that grows.
type refusal struct {
	digest [sha256.Size]byte
	err    error
	pause  time.Duration
}

// digest identifies a response's version and resources, in any order (a
// server may list the same resources in another order each time).
func digest(resp *discoveryv3.DiscoveryResponse) [sha256.Size]byte {
	each := make([][sha256.Size]byte, len(resp.GetResources()))
	for i, r := range resp.GetResources() {
		each[i] = sha256.Sum256(append([]byte(r.GetTypeUrl()+"\x00"), r.GetValue()...))
	}
	slices.SortFunc(each, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	h.Write([]byte(resp.GetTypeUrl() + "\x00" + resp.GetVersionInfo() + "\x00"))
	for _, d := range each {
		h.Write(d[:])
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// New checks cfg and prepares the connection (nothing is dialled until Run).
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.Target == "":
		return nil, errors.New("adsclient: no target")
	case cfg.Node == nil || cfg.Node.GetId() == "":
		return nil, errors.New("adsclient: no node id")
	case cfg.TypeURL == "":
		return nil, errors.New("adsclient: no type URL")
	case cfg.Apply == nil:
		return nil, errors.New("adsclient: no Apply")
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(30*time.Second, cfg.MinBackoff)
	}
	creds := cfg.Credentials
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.MaxRecvBytes > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxRecvBytes)))
	}
	conn, err := grpc.NewClient(cfg.Target, opts...)
	if err != nil {
		return nil, fmt.Errorf("adsclient: %s: %w", cfg.Target, err)
	}
	return &Client{cfg: cfg, conn: conn}, nil
}

// Run streams until ctx ends (then it returns nil), reconnecting after
// every failure. Call it once.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	pause := c.cfg.MinBackoff
	for {
		delivered, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if delivered {
			pause = c.cfg.MinBackoff
		}
		wait := jitter(pause)
		if c.cfg.OnStreamError != nil {
			c.cfg.OnStreamError(err, wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		pause = min(2*pause, c.cfg.MaxBackoff)
	}
}

// jitter spreads d over [d/2, d], so that replicas cut off together do not
// come back together.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// stream runs one ADS stream until it fails; delivered reports whether a
// response arrived on it.
func (c *Client) stream(ctx context.Context) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.cfg.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.cfg.Headers))
	}
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	first := &discoveryv3.DiscoveryRequest{Node: c.cfg.Node, TypeUrl: c.cfg.TypeURL, VersionInfo: c.acked}
	if err := s.Send(first); err != nil {
		return false, err
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return delivered, err
		}
		delivered = true
		req, wait := c.answer(resp)
		if wait > 0 {
			select {
			case <-ctx.Done():
				return delivered, ctx.Err()
			case <-time.After(wait):
			}
		}
		if err := s.Send(req); err != nil {
			return delivered, err
		}
	}
}

// answer applies resp and builds the ACK or NACK for it, and how long to
// wait before sending it (a resend of the response last refused).
func (c *Client) answer(resp *discoveryv3.DiscoveryResponse) (*discoveryv3.DiscoveryRequest, time.Duration) {
	req := &discoveryv3.DiscoveryRequest{TypeUrl: c.cfg.TypeURL, ResponseNonce: resp.GetNonce(), VersionInfo: c.acked}
	d := digest(resp)
	if r := c.refused; r != nil && r.digest == d {
		r.pause = min(max(2*r.pause, c.cfg.MinBackoff), c.cfg.MaxBackoff, maxRefusedPause)
		req.ErrorDetail = nackDetail(r.err)
		return req, r.pause
	}
	if err := c.apply(resp); err != nil {
		c.refused = &refusal{digest: d, err: err}
		req.ErrorDetail = nackDetail(err)
		return req, 0
	}
	c.refused = nil
	c.acked = resp.GetVersionInfo()
	req.VersionInfo = c.acked
	return req, 0
}

func nackDetail(err error) *status.Status {
	return &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
}

func (c *Client) apply(resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != c.cfg.TypeURL {
		return fmt.Errorf("response of type %q; subscribed to %q only", resp.GetTypeUrl(), c.cfg.TypeURL)
	}
	for i, r := range resp.GetResources() {
		if r.GetTypeUrl() != c.cfg.TypeURL {
			return fmt.Errorf("resources[%d]: type %q, want %q", i, r.GetTypeUrl(), c.cfg.TypeURL)
		}
	}
	return c.cfg.Apply(resp.GetVersionInfo(), resp.GetResources())
}
