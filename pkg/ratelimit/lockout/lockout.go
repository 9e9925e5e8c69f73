// Package lockout locks a key out for a while after it trips a limit, for
// longer on each repeated trip (1m, 2m, 4m, ... up to a cap): the answer to
// credential stuffing that a rate limit alone does not give, as a window
// that refills lets an attacker resume at full speed. It knows nothing of
// Envoy; pkg/envoy trips a key when a charged limit's budget is spent and
// asks Locked before admitting the key's next request.
//
// Semantics of every Store:
//   - Trip on a key that is not locked counts one trip and locks the key
//     for Policy.Next of the previous lockout: Initial on the first trip,
//     then each lockout Factor times the last one (to the millisecond),
//     capped at Max.
//   - Trip on a key that is still locked counts nothing and changes
//     nothing: it reports the time left and the trips so far. Requests
//     admitted before the lockout began may finish after it (each failing
//     one trips again); they are one offence, not many, and must not
//     escalate the lockout.
//   - A key's trips are forgotten once Policy.Forget passes after its
//     latest lockout ends without a new trip; its next trip is a first one
//     again. The state of a key therefore expires by itself.
//   - Trip is atomic per key: concurrent trips of one key, from any number
//     of replicas sharing a Redis store, count as if they came one by one.
//   - The clock is the store's own: Redis TIME for the Redis store, the
//     injected clock for the memory store.
//
// Errors are backend failures or an invalid Policy, never "locked".
package lockout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/keypart"
)

// Store holds the lockouts of every key. Implementations are safe for
// concurrent use.
type Store interface {
	// Locked reports how long key stays locked out; 0 when it is not.
	Locked(ctx context.Context, key string) (time.Duration, error)
	// Trip counts one trip of key and locks it for Initial*Factor^(trips-1)
	// (see Policy.Next), capped at Max; it returns that duration and the
	// trip count. A key still locked is not tripped again: Trip returns the
	// time left and the count so far.
	Trip(ctx context.Context, key string, p Policy) (time.Duration, int64, error)
	// Close releases the store's resources; it is safe to call twice. It
	// never closes a Redis client the store was given.
	Close() error
}

// Policy grows a key's lockout on repeated trips.
type Policy struct {
	// Initial is the first lockout; at least 1ms.
	Initial time.Duration
	// Factor multiplies each further lockout: at least 1 (1 keeps every
	// lockout at Initial, 2 doubles).
	Factor float64
	// Max caps the lockout: at least Initial, at most MaxDuration.
	Max time.Duration
	// Forget is how long after its latest lockout ends a key's trips are
	// forgotten if it trips no more; 0 means 2*Max. Else at least 1ms and
	// at most MaxDuration.
	Forget time.Duration
}

// MaxDuration bounds Max and Forget: a lockout is a brake, not a ban, and
// the bound keeps every instant a store computes far from overflow.
const MaxDuration = 366 * 24 * time.Hour

// ErrInvalid means a Policy is unusable: a configuration error, never
// request input. Validate's errors and Trip's for a bad Policy wrap it.
var ErrInvalid = errors.New("lockout: invalid policy")

// ErrClosed means the store was closed.
var ErrClosed = errors.New("lockout: store closed")

// Validate returns every problem of p, each naming its field, or nil.
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if p.Initial < time.Millisecond {
		bad("initial %v is below 1ms", p.Initial)
	}
	if math.IsNaN(p.Factor) || math.IsInf(p.Factor, 0) || p.Factor < 1 {
		bad("factor %v must be a number of at least 1", p.Factor)
	}
	switch {
	case p.Max < p.Initial:
		bad("max %v is below initial %v", p.Max, p.Initial)
	case p.Max > MaxDuration:
		bad("max %v is above %v", p.Max, MaxDuration)
	}
	switch {
	case p.Forget < 0:
		bad("forget %v is negative", p.Forget)
	case p.Forget > 0 && p.Forget < time.Millisecond:
		bad("forget %v is below 1ms (0 means 2*max)", p.Forget)
	case p.Forget > MaxDuration:
		bad("forget %v is above %v", p.Forget, MaxDuration)
	}
	return errors.Join(errs...)
}

// ForgetAfter is Forget with its default applied: 2*Max when Forget is 0.
func (p Policy) ForgetAfter() time.Duration {
	if p.Forget == 0 {
		return 2 * p.Max
	}
	return p.Forget
}

// Next returns the lockout that follows one of prev, in whole
// milliseconds: Initial when prev is 0 (a first trip), else prev*Factor
// rounded down, never below Initial nor above Max. Stores keep the last
// lockout rather than recompute Initial*Factor^(trips-1), so that a trip
// costs O(1) whatever the count, and the Redis script (which mirrors this
// function with the same float64 arithmetic) computes exactly the same
// durations. p must be valid.
func (p Policy) Next(prev time.Duration) time.Duration {
	initial, limit := p.Initial.Milliseconds(), p.Max.Milliseconds()
	if prev <= 0 {
		return time.Duration(initial) * time.Millisecond
	}
	next := math.Floor(float64(prev.Milliseconds()) * p.Factor)
	if next >= float64(limit) {
		return time.Duration(limit) * time.Millisecond
	}
	return time.Duration(max(int64(next), initial)) * time.Millisecond
}

// StorageKey returns key escaped for use inside a Redis hash tag: it never
// holds '{', '}' or ':', and distinct keys never share a result; a key
// longer than 128 bytes after escaping becomes "#" + its hex SHA-256.
func StorageKey(key string) string {
	var b strings.Builder
	b.Grow(len(key))
	keypart.Write(&b, key, "%{}:#")
	return b.String()
}
