package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// problem is an RFC 9457 problem, the body of every error answer.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

func (p *problem) Error() string { return p.Detail }

// badRequest is a 400 problem saying what is wrong with the call.
func badRequest(format string, args ...any) error {
	return &problem{Status: http.StatusBadRequest, Title: "Bad request", Detail: fmt.Sprintf(format, args...)}
}

// asProblem maps any handler error to its problem: a store failure is 503
// (the store, not the call, is at fault; retry later).
func asProblem(err error) *problem {
	var p *problem
	if !errors.As(err, &p) {
		p = &problem{Status: http.StatusServiceUnavailable, Title: "Store unavailable", Detail: err.Error()}
		if errors.Is(err, context.DeadlineExceeded) {
			p.Title = "Store timed out"
		}
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	return p
}
