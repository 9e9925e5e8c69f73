package memstore

import (
	"context"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

var _ idempotency.Inspector = (*Store)(nil)

// Inspect implements idempotency.Inspector.
func (s *Store) Inspect(_ context.Context, scope, key string) (idempotency.Record, bool, error) {
	return s.inspect(scope, key, false, false)
}

// Delete implements idempotency.Inspector.
func (s *Store) Delete(_ context.Context, scope, key string, force bool) (idempotency.Record, bool, error) {
	return s.inspect(scope, key, true, force)
}

// inspect describes the record of (scope, key) and, when del is set,
// deletes it (a record in progress only when force is set).
func (s *Store) inspect(scope, key string, del, force bool) (idempotency.Record, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return idempotency.Record{}, false, idempotency.ErrClosed
	}
	now := s.now()
	r := s.live(id{scope, key}, now)
	if r == nil {
		return idempotency.Record{}, false, nil
	}
	rec := describe(r, now)
	if del {
		if r.state == inProgress && !force {
			return rec, true, idempotency.ErrInFlight
		}
		delete(s.records, id{scope, key})
	}
	return rec, true, nil
}

func describe(r *record, now time.Time) idempotency.Record {
	rec := idempotency.Record{State: idempotency.StateInProgress, Owner: r.token, Fingerprint: r.fp.String(),
		ExpiresIn: r.expires.Sub(now), Location: "memory"}
	if r.state == completed {
		rec.State = idempotency.StateCompleted
		if r.resp.NotReplayable {
			rec.State = idempotency.StateNotReplayable
		}
		rec.Status, rec.Headers = r.resp.Status, len(r.resp.Headers)
		rec.BodyBytes, rec.BodyRef = int64(len(r.resp.Body)), r.resp.BodyRef
		if r.resp.BodyRef != nil {
			rec.BodyBytes = r.resp.BodyRef.Size
		}
	}
	return rec
}
