package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

var (
	//go:embed inspect.lua
	inspectSrc    string
	inspectScript = redisscript.New(inspectSrc)
)

var _ idempotency.Inspector = (*Store)(nil)

// Inspect implements idempotency.Inspector.
func (s *Store) Inspect(ctx context.Context, scope, key string) (idempotency.Record, bool, error) {
	rec, found, _, err := s.inspect(ctx, scope, key, "")
	return rec, found, err
}

// Delete implements idempotency.Inspector: one script reads and deletes,
// so a record cannot go in flight between the check and the DEL.
func (s *Store) Delete(ctx context.Context, scope, key string, force bool) (idempotency.Record, bool, error) {
	mode := "del"
	if force {
		mode = "force"
	}
	rec, found, deleted, err := s.inspect(ctx, scope, key, mode)
	if err == nil && found && !deleted {
		err = idempotency.ErrInFlight
	}
	return rec, found, err
}

func (s *Store) inspect(ctx context.Context, scope, key, mode string) (rec idempotency.Record, found, deleted bool, err error) {
	if s.closed.Load() {
		return rec, false, false, idempotency.ErrClosed
	}
	rkey := s.Key(scope, key)
	v, err := inspectScript.Run(ctx, s.client, []string{rkey}, []any{mode}).Result()
	if err != nil {
		return rec, false, false, fmt.Errorf("idempotency inspect: %w", err)
	}
	arr, ok := v.([]any)
	if !ok || (len(arr) != 0 && len(arr) != 10) {
		return rec, false, false, fmt.Errorf("%w: inspect reply %T of %d", ErrUnexpectedReply, v, len(arr))
	}
	if len(arr) == 0 {
		return rec, false, false, nil
	}
	rec, err = s.parseInspect(arr[1:])
	rec.Location = "redis " + rkey
	return rec, true, arr[0] == int64(1), err
}

// parseInspect reads {pttl, st, tok, fp, status, hdr, body, enc, ref}.
func (s *Store) parseInspect(f []any) (idempotency.Record, error) {
	pttl, _ := f[0].(int64)
	str := make([]string, len(f)-1)
	for i, e := range f[1:] {
		str[i], _ = e.(string)
	}
	rec := idempotency.Record{Owner: str[1], Fingerprint: str[2], ExpiresIn: time.Duration(max(pttl, 0)) * time.Millisecond}
	switch str[0] {
	case "p":
		rec.State = idempotency.StateInProgress
		return rec, nil
	case stateNotReplayable:
		rec.State = idempotency.StateNotReplayable
		rec.Status, _ = strconv.Atoi(str[3])
		return rec, nil
	case stateCompleted:
		rec.State = idempotency.StateCompleted
	default:
		return rec, fmt.Errorf("%w: record state %q", ErrUnexpectedReply, str[0])
	}
	resp, err := s.decodeRecord([]any{str[3], str[4], str[5], str[6], str[7]})
	if err != nil {
		return rec, err
	}
	rec.Status, rec.Headers, rec.BodyBytes, rec.BodyRef = resp.Status, len(resp.Headers), int64(len(resp.Body)), resp.BodyRef
	if resp.BodyRef != nil {
		rec.BodyBytes = resp.BodyRef.Size
	}
	return rec, nil
}
