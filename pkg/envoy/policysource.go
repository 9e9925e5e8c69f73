package envoy

import (
	"reflect"

	"github.com/extauthz/extauthz/pkg/policy"
)

// PolicySource hands out the current policy snapshot; *policy.Watcher is one.
// Current may return nil (nothing loaded): every descriptor is then unmatched.
type PolicySource interface {
	Current() *policy.Policy
}

// PolicyFunc adapts a function to PolicySource.
type PolicyFunc func() *policy.Policy

// Current returns f().
func (f PolicyFunc) Current() *policy.Policy { return f() }

// IsNil reports whether v is nil or an interface holding a nil pointer or func.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Interface, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
