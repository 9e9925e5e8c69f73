package authz

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/extauthz/extauthz/pkg/envoy"
	"github.com/extauthz/extauthz/pkg/policy"
)

// ContentTypeProblem is the media type of RFC 9457 problem details.
const ContentTypeProblem = "application/problem+json"

// ProblemTypeBase prefixes the problem types defined here: each names a
// section of docs/idempotency.md, which explains the case and what a client
// should do. The IETF Idempotency-Key draft registers no problem types.
const ProblemTypeBase = "https://github.com/extauthz/extauthz/blob/main/docs/idempotency.md#"

// Problem types, one per case a client must tell apart.
const (
	// ProblemKeyMissing: 400, the route requires an Idempotency-Key.
	ProblemKeyMissing = ProblemTypeBase + "idempotency-key-missing"
	// ProblemKeyMalformed: 400, the Idempotency-Key is not a valid key.
	ProblemKeyMalformed = ProblemTypeBase + "idempotency-key-malformed"
	// ProblemInProgress: 409, a request with this key is still running.
	ProblemInProgress = ProblemTypeBase + "idempotency-key-in-progress"
	// ProblemKeyReused: 422, the key was used with a different request.
	ProblemKeyReused = ProblemTypeBase + "idempotency-key-reused"
	// ProblemBodyTooLarge: 413, the request body could not be read whole
	// for the fingerprint.
	ProblemBodyTooLarge = ProblemTypeBase + "idempotency-request-too-large"
	// ProblemNotReplayable: 409, the request with this key already ran but
	// its response was not kept; it will never run again under this key.
	ProblemNotReplayable = ProblemTypeBase + "idempotency-response-not-replayable"
	// ProblemUnavailable: 503, the idempotency store is down and the route
	// fails closed.
	ProblemUnavailable = ProblemTypeBase + "idempotency-unavailable"
	// ProblemReplayUnavailable: 503, the request ran before but its stored
	// reply (in object storage) cannot be sent now; it is never run again.
	ProblemReplayUnavailable = ProblemTypeBase + "idempotency-replay-unavailable"
	// ProblemReplayForbidden: 403, from the replay endpoint only: no valid
	// replay ticket for this request.
	ProblemReplayForbidden = ProblemTypeBase + "idempotency-replay-forbidden"
	// ProblemQuotaExceeded: 429, the IANA-registered type of the RateLimit
	// header fields draft.
	ProblemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	// ProblemTooManyInFlight: 429, the caller already has the route's
	// max_in_flight requests running; one must end before another starts.
	ProblemTooManyInFlight = "https://github.com/extauthz/extauthz/blob/main/docs/policy.md#max_in_flight"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	// Type identifies the kind of problem (a URI).
	Type string `json:"type"`
	// Title is a short summary of the kind, the same for every occurrence.
	Title string `json:"title"`
	// Status repeats the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// ViolatedPolicies names the exceeded quotas (quota-exceeded only).
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// OriginalStatus is the status the first request got, when known
	// (idempotency-response-not-replayable only).
	OriginalStatus int `json:"original-status,omitempty"`
	// RetryAfterBasis says how Retry-After was chosen
	// (idempotency-key-in-progress only): RetryAfterRouteLatency or
	// RetryAfterDefault.
	RetryAfterBasis string `json:"retry-after-basis,omitempty"`
}

// Values of Problem.RetryAfterBasis.
const (
	// RetryAfterRouteLatency: the route's recent latency on this replica,
	// less the time the outstanding request has run.
	RetryAfterRouteLatency = "route-latency"
	// RetryAfterDefault: no request of the route has finished on this
	// replica yet; DefaultInProgressWait.
	RetryAfterDefault = "default"
)

// JSON encodes p; a Problem of strings and ints always encodes.
func (p Problem) JSON() []byte {
	b, _ := json.Marshal(p)
	return b
}

// reply is an HTTP response decided here instead of the upstream's: a
// problem, or a replayed stored response. The servers translate it to
// ext_authz's DeniedHttpResponse or ext_proc's ImmediateResponse.
type reply struct {
	status  int
	headers [][2]string // name (lower case), value; names may repeat
	body    []byte
}

// problemReply renders p as a reply, with extra headers (e.g. Retry-After).
func problemReply(p Problem, extra ...[2]string) *reply {
	hs := append([][2]string{{"content-type", ContentTypeProblem}}, extra...)
	return &reply{status: p.Status, headers: hs, body: p.JSON()}
}

// retryAfter renders d as a Retry-After header: whole seconds, rounded up,
// at least 1 (0 would invite an immediate retry storm).
func retryAfter(d time.Duration) [2]string {
	return [2]string{envoy.HeaderRetryAfter, strconv.FormatInt(max(envoy.CeilSeconds(d), 1), 10)}
}

// problemKeyMissing names the route's key header, when it is not
// Idempotency-Key, so that a webhook sender's operator sees which one.
func problemKeyMissing(header string) *reply {
	detail := "This operation requires an Idempotency-Key header."
	if header != policy.DefaultKeyHeader {
		detail = "This operation requires an idempotency key in the " + header + " header."
	}
	return problemReply(Problem{Type: ProblemKeyMissing, Title: "Idempotency-Key is missing", Status: 400, Detail: detail})
}

func problemKeyMalformed(err error) *reply {
	return problemReply(Problem{Type: ProblemKeyMalformed, Title: "Idempotency-Key is malformed", Status: 400,
		Detail: err.Error() + `; send 1 to 255 printable ASCII characters, bare or as a quoted string ("...").`})
}

// problemInProgress: 409 with Retry-After wait, an estimate from the
// route's recent latency when fromLatency, else the short default.
func problemInProgress(wait time.Duration, fromLatency bool) *reply {
	p := Problem{Type: ProblemInProgress, Title: "A request is outstanding for this Idempotency-Key", Status: 409,
		Detail: "Retry the same request after the Retry-After delay. It is an estimate of when the outstanding request will be done, " +
			"from how long this route's recent requests took (90th percentile) less the time this one has run; " +
			"a retry still too early gets another 409.",
		RetryAfterBasis: RetryAfterRouteLatency}
	if !fromLatency {
		p.Detail = "Retry the same request after the Retry-After delay. No recent request of this route has finished here yet, " +
			"so it is a short default, not an estimate; a retry still too early gets another 409."
		p.RetryAfterBasis = RetryAfterDefault
	}
	return problemReply(p, retryAfter(wait))
}

func problemKeyReused() *reply {
	return problemReply(Problem{Type: ProblemKeyReused, Title: "Idempotency-Key is already used", Status: 422,
		Detail: "This key was used with a different request (method, path, body or headers); use a new key."})
}

func problemBodyTooLarge() *reply {
	return problemReply(Problem{Type: ProblemBodyTooLarge, Title: "Request body too large for idempotency", Status: 413,
		Detail: "The request body could not be read whole, so the request cannot be identified for its Idempotency-Key."})
}

// problemNotReplayable: 409 and no Retry-After, since retrying cannot help;
// status is the first request's status, 0 when unknown.
func problemNotReplayable(status int) *reply {
	return problemReply(Problem{Type: ProblemNotReplayable, Title: "The request with this Idempotency-Key already ran", Status: 409,
		Detail:         "It ran once, but its response was not kept (too large, cut short or unknown), so it cannot be replayed; it will not run again. Check the operation's outcome, and use a new key for a new operation.",
		OriginalStatus: status})
}

func problemUnavailable() *reply {
	return problemReply(Problem{Type: ProblemUnavailable, Title: "Idempotency is temporarily unavailable", Status: 503,
		Detail: "The request was not run. Retry it with the same Idempotency-Key."}, retryAfter(time.Second))
}

func problemReplayUnavailable() *reply {
	return problemReplayUnavailableDetail("The request already ran; its stored reply cannot be sent now. Retry later with the same Idempotency-Key: it will not run again.")
}

func problemReplayUnavailableDetail(detail string) *reply {
	return problemReply(Problem{Type: ProblemReplayUnavailable, Title: "The stored reply is unavailable", Status: 503,
		Detail: detail}, retryAfter(time.Second))
}

// problemQuotaExceeded is the 429 body; the caller adds the RateLimit and
// Retry-After headers.
func problemQuotaExceeded(policies []string) *reply {
	return problemReply(Problem{Type: ProblemQuotaExceeded, Title: "Quota exceeded", Status: 429,
		Detail: "Too many requests; retry after the Retry-After delay.", ViolatedPolicies: policies})
}

func problemTooManyInFlight(route string, limit int) *reply {
	return problemReply(Problem{Type: ProblemTooManyInFlight, Title: "Too many requests in flight", Status: 429,
		Detail:           "The route allows " + strconv.Itoa(limit) + " requests of one caller at once; retry when one has ended (Retry-After).",
		ViolatedPolicies: []string{route + envoy.InFlightSuffix}})
}
