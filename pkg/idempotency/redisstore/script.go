package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// One script per transition; each touches one key, so each runs unchanged
// on Redis Cluster. Every script is also safe to apply twice for the same
// owner token: redisscript never lets go-redis re-send one, and a re-send
// that slips through (a proxy, another client) is harmless too.
var (
	//go:embed begin.lua
	beginSrc string
	//go:embed complete.lua
	completeSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed renew.lua
	renewSrc string

	beginScript    = redisscript.New(beginSrc)
	completeScript = redisscript.New(completeSrc)
	releaseScript  = redisscript.New(releaseSrc)
	renewScript    = redisscript.New(renewSrc)
)

// Scripts returns the Lua source of every script the store runs, for
// loading them (SCRIPT LOAD) on every master before traffic arrives, so
// that no call pays a NOSCRIPT round trip and an EVAL that compiles it.
func Scripts() []string {
	return []string{beginSrc, completeSrc, releaseSrc, renewSrc}
}

// Processor runs one command: *redis.Client and *redis.ClusterClient.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Reply codes of begin.lua. The scripts also hard-code the hash fields
// st, tok, fp, status, hdr, body, enc, ref, rd and the states 'p'
// (IN_PROGRESS), 'c' (COMPLETED) and 'n' (COMPLETED, not replayable):
// change the Lua and this file together.
const (
	codeAcquired      = 1
	codeReplay        = 2
	codeInProgress    = 3
	codeMismatch      = 4
	codeNotReplayable = 5
)

// Record states written by complete.lua.
const (
	stateCompleted     = "c"
	stateNotReplayable = "n"
)

// Body encodings stored in the enc field.
const (
	encIdentity = ""
	encGzip     = "gzip"
)

// ErrUnexpectedReply means Redis answered a script with a reply of the wrong
// shape (another script under the same SHA, a proxy, or a corrupt record).
var ErrUnexpectedReply = errors.New("idempotency redisstore: unexpected reply")

// ms renders d as whole milliseconds, rounded up (TTLs are validated >= 1ms).
func ms(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// parseBegin turns begin.lua's reply into an Outcome (without the lease,
// which the caller fills in).
func (s *Store) parseBegin(v any) (idempotency.Outcome, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return idempotency.Outcome{}, fmt.Errorf("%w: %T", ErrUnexpectedReply, v)
	}
	code, ok := arr[0].(int64)
	if !ok {
		return idempotency.Outcome{}, fmt.Errorf("%w: code %T", ErrUnexpectedReply, arr[0])
	}
	switch {
	case code == codeAcquired && len(arr) == 1:
		return idempotency.Outcome{Kind: idempotency.Acquired}, nil
	case code == codeMismatch && len(arr) == 1:
		return idempotency.Outcome{Kind: idempotency.Mismatch}, nil
	case code == codeInProgress && len(arr) == 2:
		pttl, ok := arr[1].(int64)
		if !ok {
			return idempotency.Outcome{}, fmt.Errorf("%w: pttl %T", ErrUnexpectedReply, arr[1])
		}
		return idempotency.Outcome{Kind: idempotency.InProgress, RetryAfter: time.Duration(max(pttl, 1)) * time.Millisecond}, nil
	case code == codeNotReplayable && len(arr) == 2:
		st, _ := arr[1].(string)
		status, err := strconv.Atoi(st)
		if err != nil || (status != 0 && (status < 100 || status > 599)) {
			return idempotency.Outcome{}, fmt.Errorf("%w: status %q", ErrUnexpectedReply, st)
		}
		return idempotency.Outcome{Kind: idempotency.Unreplayable, Response: idempotency.Response{Status: status, NotReplayable: true}}, nil
	case code == codeReplay && len(arr) == 6:
		resp, err := s.decodeRecord(arr[1:])
		if err != nil {
			return idempotency.Outcome{}, err
		}
		return idempotency.Outcome{Kind: idempotency.Replay, Response: resp}, nil
	}
	return idempotency.Outcome{}, fmt.Errorf("%w: code %d with %d elements", ErrUnexpectedReply, code, len(arr))
}

// decodeRecord reads {status, headers, body, encoding, ref} of a COMPLETED record.
func (s *Store) decodeRecord(f []any) (idempotency.Response, error) {
	var str [5]string
	for i, e := range f {
		v, ok := e.(string)
		if !ok {
			return idempotency.Response{}, fmt.Errorf("%w: record field %d is %T", ErrUnexpectedReply, i, e)
		}
		str[i] = v
	}
	status, err := strconv.Atoi(str[0])
	if err != nil || status < 100 || status > 599 {
		return idempotency.Response{}, fmt.Errorf("%w: status %q", ErrUnexpectedReply, str[0])
	}
	hs, err := decodeHeaders([]byte(str[1]))
	if err != nil {
		return idempotency.Response{}, err
	}
	body, err := decodeBody(str[3], []byte(str[2]), s.maxBody)
	if err != nil {
		return idempotency.Response{}, err
	}
	ref, err := decodeRef([]byte(str[4]))
	if err != nil {
		return idempotency.Response{}, err
	}
	return idempotency.Response{Status: status, Headers: hs, Body: body, BodyRef: ref}, nil
}

// lost maps a 0/1 script reply to nil or ErrLeaseLost.
func lost(v any, err error) error {
	if err != nil {
		return err
	}
	switch v {
	case int64(1):
		return nil
	case int64(0):
		return idempotency.ErrLeaseLost
	}
	return fmt.Errorf("%w: %v", ErrUnexpectedReply, v)
}
