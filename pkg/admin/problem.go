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
	// param names the call's parameter at fault, for the audit log: Detail
	// may quote the caller's values back to it, the log never does.
	param string
}

func (p *problem) Error() string { return p.Detail }

// audit is what the audit log says of p: its title and the parameter at
// fault. Both are fixed strings of ours, never a value the caller sent
// (a descriptor or a JSON field name may be a credential).
func (p *problem) audit() string {
	if p.param == "" {
		return p.Title
	}
	return p.Title + ": " + p.param
}

// badRequest is a 400 problem saying what is wrong with the call's param.
func badRequest(param, format string, args ...any) error {
	return &problem{Status: http.StatusBadRequest, Title: "Bad request", Detail: fmt.Sprintf(format, args...), param: param}
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
