package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid matches (with errors.Is) every error Load returns for a policy
// that could not be read or failed validation.
var ErrInvalid = errors.New("invalid policy")

// Problem is one thing wrong with a policy, located as precisely as known.
type Problem struct {
	// File is the file the problem is in (or the path given to Load).
	File string
	// Line is the 1-based line in File; 0 when unknown.
	Line int
	// Field is the path of the offending field, e.g.
	// "descriptors[0].descriptors[1].rate_limit.unit"; empty for the file itself.
	Field string
	// Message says what is wrong.
	Message string
	// Err is the underlying cause (an I/O error, say), or nil.
	Err error
}

// Error formats the problem as "file:line: field: message".
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Unwrap returns the underlying cause, so errors.Is(err, fs.ErrNotExist) works.
func (p *Problem) Unwrap() error { return p.Err }

// Is makes every Problem match ErrInvalid.
func (p *Problem) Is(target error) bool { return target == ErrInvalid }

// Errors is every problem found in one load, in file order. Load collects
// them all rather than stopping at the first, so one run of `extauthz
// validate` shows everything to fix.
type Errors []*Problem

// Error lists the problems, one per line.
func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, p := range e {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes the problems to errors.Is and errors.As.
func (e Errors) Unwrap() []error {
	errs := make([]error, len(e))
	for i, p := range e {
		errs[i] = p
	}
	return errs
}

// Is makes Errors match ErrInvalid even when empty.
func (e Errors) Is(target error) bool { return target == ErrInvalid }

// err returns e as an error, or nil when there are no problems (never a
// typed nil inside a non-nil interface).
func (e Errors) err() error {
	if len(e) == 0 {
		return nil
	}
	return e
}
