package authz

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// HeaderReplayTicket marks a request whose stored reply lives in object
// storage: ext_authz or ext_proc sets it (and clears the route cache), the
// shipped Envoy configs route requests carrying it to extauthz's replay
// endpoint, and strip any copy a client sent before routing.
const HeaderReplayTicket = "x-extauthz-replay"

// HeaderReplayScope goes with the ticket: set by the same ext_authz /
// ext_proc decision, it proves which caller that decision identified (an
// HMAC of the request's scope under the replay secret; the scope itself
// never travels in clear here). The replay endpoint serves a ticket only
// with the proof of the ticket's own scope, so a ticket that leaks is
// worthless without the identity it was issued to, and a ticket presented
// with another caller's proof is refused. The shipped Envoy configs strip
// client copies of both headers before routing.
const HeaderReplayScope = "x-extauthz-replay-scope"

// scopeProofContext separates the scope proof's HMAC input from a ticket's
// (a JSON object, which starts with '{').
const scopeProofContext = "extauthz replay scope\x00"

// Ticket lifetime and key size.
const (
	// DefaultTicketTTL is how long a ticket is accepted: the replay request
	// follows its ext_authz/ext_proc decision within milliseconds.
	DefaultTicketTTL = 30 * time.Second
	// MinReplaySecret is the shortest secret accepted (HMAC-SHA256 key).
	MinReplaySecret = 32
)

// ticket is what a replay needs, signed so that no client can forge one:
// the record's scope and key (the replay endpoint checks the request's
// Idempotency-Key against it), the stored status and allow-listed headers,
// and the body's reference. Nothing else is looked up at replay time, so
// the endpoint needs only the blob store.
type ticket struct {
	Expires int64                `json:"exp"` // Unix seconds
	Scope   string               `json:"scope"`
	Key     string               `json:"key"`
	Status  int                  `json:"status"`
	Headers []idempotency.Header `json:"headers,omitempty"`
	Ref     blob.Ref             `json:"ref"`
	// Route is the policy route's name, the endpoint's metric label
	// (empty in tickets of older replicas: counted as UnknownRoute).
	Route string `json:"route,omitempty"`
	// KeyHeader is the request header that carries Key, the route's
	// key_header (empty: Idempotency-Key, and in older replicas' tickets).
	KeyHeader string `json:"key_header,omitempty"`
}

// keyHeader is the request header the endpoint reads the key from.
func (t ticket) keyHeader() string {
	if t.KeyHeader == "" {
		return HeaderIdempotencyKey
	}
	return t.KeyHeader
}

// Ticket errors; the endpoint answers each with 403 and never says which.
var (
	errTicketForged  = errors.New("replay ticket: bad signature")
	errTicketExpired = errors.New("replay ticket: expired")
	errTicketFormat  = errors.New("replay ticket: malformed")
)

// Replayer signs and verifies replay tickets with a secret the replicas
// share (EXTAUTHZ_REPLAY_SECRET), so that any replica's endpoint accepts a
// ticket another replica issued.
type Replayer struct {
	secret []byte
	ttl    time.Duration
	now    func() time.Time
}

// NewReplayer returns a Replayer for secret; an empty secret draws a random
// one (valid only while a single replica serves replays).
func NewReplayer(secret []byte, now func() time.Time) (*Replayer, error) {
	if len(secret) == 0 {
		secret = make([]byte, MinReplaySecret)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
	}
	if len(secret) < MinReplaySecret {
		return nil, fmt.Errorf("replay secret has %d bytes, want at least %d", len(secret), MinReplaySecret)
	}
	if now == nil {
		now = time.Now
	}
	return &Replayer{secret: secret, ttl: DefaultTicketTTL, now: now}, nil
}

// issue signs a ticket for a stored response whose body is in object
// storage: base64url(JSON) "." base64url(HMAC-SHA256(secret, JSON)).
func (r *Replayer) issue(route, scope, key, keyHeader string, resp idempotency.Response, hs []idempotency.Header) string {
	if keyHeader == HeaderIdempotencyKey {
		keyHeader = "" // the default, as older replicas' tickets say it
	}
	t := ticket{Expires: r.now().Add(r.ttl).Unix(), Scope: scope, Key: key, Status: resp.Status, Headers: hs, Ref: *resp.BodyRef, Route: route, KeyHeader: keyHeader}
	payload, _ := json.Marshal(t) // strings, ints: always encodes
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(r.mac(payload))
}

// scopeProof is HeaderReplayScope's value for scope: base64url of
// HMAC-SHA256(secret, scopeProofContext + scope).
func (r *Replayer) scopeProof(scope string) string {
	m := hmac.New(sha256.New, r.secret)
	m.Write([]byte(scopeProofContext))
	m.Write([]byte(scope))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// replayMark is what a decision puts on a request it sends to the replay
// endpoint: the ticket and the proof of the caller's scope.
type replayMark struct{ ticket, scope string }

// headers are the mark's request headers, name and value.
func (m replayMark) headers() [2][2]string {
	return [2][2]string{{HeaderReplayTicket, m.ticket}, {HeaderReplayScope, m.scope}}
}

func (r *Replayer) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, r.secret)
	m.Write(payload)
	return m.Sum(nil)
}

// verify checks a ticket's signature and expiry and decodes it.
func (r *Replayer) verify(s string) (ticket, error) {
	var t ticket
	p, sig, ok := strings.Cut(s, ".")
	if !ok {
		return t, errTicketFormat
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p)
	mac, err2 := enc.DecodeString(sig)
	if err1 != nil || err2 != nil {
		return t, errTicketFormat
	}
	if !hmac.Equal(mac, r.mac(payload)) {
		return t, errTicketForged
	}
	if err := json.Unmarshal(payload, &t); err != nil {
		return t, errTicketFormat
	}
	if r.now().Unix() > t.Expires {
		return t, errTicketExpired
	}
	return t, nil
}
