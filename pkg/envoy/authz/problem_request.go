package authz

// ProblemRequestMalformed is 400 for a CheckRequest without the HTTP method
// and path Envoy always sends for an HTTP request (e.g. a caller that is not
// Envoy's HTTP filter). It is a decision, not a gRPC error: with the
// shipped failure_mode_allow: false an error would be a 503, and with
// failure_mode_allow: true an admission.
const ProblemRequestMalformed = ProblemTypeBase + "request-malformed"

func problemRequestMalformed() *reply {
	return problemReply(Problem{Type: ProblemRequestMalformed, Title: "Request cannot be checked", Status: 400,
		Detail: "The request has no HTTP method or path."})
}
