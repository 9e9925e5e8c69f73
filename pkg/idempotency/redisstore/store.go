// Package redisstore is an idempotency.Store on Redis or Redis Cluster,
// shared by every replica so that a key holds across the fleet.
//
// Each key is one hash, `<prefix>:idem:{<escaped scope>|<escaped key>}`
// (idempotency.StorageKey inside the braces, so the whole record lives in
// one cluster slot), with the fields st (p = IN_PROGRESS, c = COMPLETED,
// n = COMPLETED but not replayable), tok (owner token), fp (fingerprint),
// and, once completed, status, hdr (encoded headers), body, enc (body
// encoding, ” or 'gzip'), ref (encoded blob.Ref when the body lives in
// object storage) and rd (digest of the completed content, so that a
// re-sent Complete succeeds and a different one does not). Every
// transition is one Lua script, atomic on the server, and every write sets a
// TTL: the lease TTL while IN_PROGRESS, the record TTL once COMPLETED, so no
// key outlives its purpose. Lease expiry is Redis key expiry, on Redis's
// clock: replicas' clocks never disagree about it.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// Defaults for Options.
const (
	DefaultPrefix        = redisclient.DefaultPrefix
	DefaultMaxBodyBytes  = 16 << 20
	DefaultCompressAbove = 1 << 10
)

// Options configure a Store. The zero value takes every default.
type Options struct {
	// Prefix starts every key; default "xa". It must not contain '{' or '}'.
	Prefix string
	// MaxBodyBytes caps a stored body (Complete answers ErrTooLarge above
	// it): a backstop that keeps Redis values bounded, the routes'
	// max_body_bytes is the operative cap. Default 16 MiB; negative means
	// no cap.
	MaxBodyBytes int64
	// CompressAbove gzips bodies of at least this many bytes when that
	// makes them smaller; default 1 KiB, negative never compresses.
	CompressAbove int
	// Wait, when its Replicas is above 0, makes Complete wait (Redis WAIT)
	// until that many replicas have the record (wait.go).
	Wait Wait
}

// Store is an idempotency.Store on Redis. It does not own the client: Close
// marks the store closed and leaves the client to its owner (it is usually
// shared with the rate-limit store).
type Store struct {
	client   Processor
	prefix   string
	maxBody  int64
	compress int
	wait     Wait
	closed   atomic.Bool
}

var _ idempotency.Store = (*Store)(nil)

// New returns a Store over client, a *redis.Client or *redis.ClusterClient.
func New(client Processor, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("idempotency redisstore: nil client")
	}
	prefix, err := redisclient.KeyPrefix(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("idempotency redisstore: %w", err)
	}
	if err := o.Wait.check(client); err != nil {
		return nil, err
	}
	s := &Store{client: client, prefix: prefix, maxBody: o.MaxBodyBytes, compress: o.CompressAbove, wait: o.Wait}
	if s.maxBody == 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.compress == 0 {
		s.compress = DefaultCompressAbove
	}
	return s, nil
}

// Key returns the Redis key of (scope, key).
func (s *Store) Key(scope, key string) string {
	return s.prefix + ":idem:{" + idempotency.StorageKey(scope, key) + "}"
}

// Begin implements idempotency.Store.
func (s *Store) Begin(ctx context.Context, scope, key string, fp idempotency.Fingerprint, ttls idempotency.TTLs) (idempotency.Outcome, error) {
	if err := idempotency.CheckBegin(key, ttls); err != nil {
		return idempotency.Outcome{}, err
	}
	if s.closed.Load() {
		return idempotency.Outcome{}, idempotency.ErrClosed
	}
	token := idempotency.NewToken()
	v, err := beginScript.Run(ctx, s.client, []string{s.Key(scope, key)}, []any{token, fp.String(), ms(ttls.Lease)}).Result()
	if err != nil {
		return idempotency.Outcome{}, fmt.Errorf("idempotency begin: %w", err)
	}
	o, err := s.parseBegin(v)
	if err != nil {
		return idempotency.Outcome{}, err
	}
	if o.Kind == idempotency.Acquired {
		o.Lease = idempotency.Lease{Scope: scope, Key: key, Token: token, TTLs: ttls}
	}
	return o, nil
}

// Complete implements idempotency.Store.
func (s *Store) Complete(ctx context.Context, l idempotency.Lease, resp idempotency.Response) error {
	if err := s.check(l); err != nil {
		return err
	}
	if err := idempotency.CheckResponse(resp, s.maxBody); err != nil {
		return err
	}
	state, enc, body := stateCompleted, "", []byte(nil)
	if resp.NotReplayable {
		state = stateNotReplayable
	} else {
		enc, body = encodeBody(resp.Body, s.compress)
	}
	f := [][]byte{[]byte(state), []byte(strconv.Itoa(resp.Status)), encodeHeaders(resp.Headers), body, []byte(enc), encodeRef(resp.BodyRef)}
	v, err := s.runComplete(ctx, s.Key(l.Scope, l.Key), // wait.go
		l.Token, ms(l.TTLs.Record), f[0], f[1], f[2], f[3], f[4], f[5], digest(f...))
	if err = lost(v, err); err != nil {
		return fmt.Errorf("idempotency complete: %w", err)
	}
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, l idempotency.Lease) error {
	if err := s.check(l); err != nil {
		return err
	}
	v, err := releaseScript.Run(ctx, s.client, []string{s.Key(l.Scope, l.Key)}, []any{l.Token}).Result()
	if err = lost(v, err); err != nil {
		return fmt.Errorf("idempotency release: %w", err)
	}
	return nil
}

// Renew implements idempotency.Store.
func (s *Store) Renew(ctx context.Context, l idempotency.Lease) error {
	if err := s.check(l); err != nil {
		return err
	}
	v, err := renewScript.Run(ctx, s.client, []string{s.Key(l.Scope, l.Key)}, []any{l.Token, ms(l.TTLs.Lease)}).Result()
	if err = lost(v, err); err != nil {
		return fmt.Errorf("idempotency renew: %w", err)
	}
	return nil
}

// Close implements idempotency.Store; later calls answer ErrClosed.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

func (s *Store) check(l idempotency.Lease) error {
	if err := idempotency.CheckLease(l); err != nil {
		return err
	}
	if s.closed.Load() {
		return idempotency.ErrClosed
	}
	return nil
}
