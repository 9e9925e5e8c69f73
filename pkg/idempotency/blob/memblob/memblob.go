// Package memblob is an in-process blob.Store for unit tests and examples.
// Bodies live in memory until deleted or past their TTL; it is not meant
// for production (a replica's memory is neither shared nor bounded by it).
package memblob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// Store keeps committed bodies in a map.
type Store struct {
	now func() time.Time

	mu      sync.Mutex
	objects map[string]object
}

type object struct {
	data    []byte
	expires time.Time // zero: never
}

var _ blob.Store = (*Store)(nil)

// New returns an empty store; now is its clock (nil: time.Now).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, objects: make(map[string]object)}
}

// Create starts a body; it becomes visible on Commit.
func (s *Store) Create(_ context.Context, name string, ttl time.Duration) (blob.Writer, error) {
	if name == "" {
		return nil, errors.New("memblob: empty name")
	}
	return &writer{s: s, name: name, ttl: ttl, sum: sha256.New()}, nil
}

// Open returns a reader over a copy-free view of the body, verified
// against ref like any store's.
func (s *Store) Open(_ context.Context, ref blob.Ref) (io.ReadCloser, error) {
	s.mu.Lock()
	o, ok := s.objects[ref.Name]
	if ok && !o.expires.IsZero() && !s.now().Before(o.expires) {
		delete(s.objects, ref.Name)
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		return nil, blob.ErrNotFound
	}
	return io.NopCloser(&verifier{r: bytes.NewReader(o.data), ref: ref, sum: sha256.New()}), nil
}

// Delete removes a body.
func (s *Store) Delete(_ context.Context, name string) error {
	s.mu.Lock()
	delete(s.objects, name)
	s.mu.Unlock()
	return nil
}

// Close is a no-op; safe to call twice.
func (s *Store) Close() error { return nil }

// Len is the number of bodies held (for tests).
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

type writer struct {
	s    *Store
	name string
	ttl  time.Duration
	buf  bytes.Buffer
	sum  hash.Hash
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	if w.done {
		return 0, errors.New("memblob: writer finished")
	}
	w.sum.Write(p)
	return w.buf.Write(p)
}

func (w *writer) Commit(context.Context) (blob.Ref, error) {
	if w.done {
		return blob.Ref{}, errors.New("memblob: writer finished")
	}
	w.done = true
	o := object{data: w.buf.Bytes()}
	if w.ttl > 0 {
		o.expires = w.s.now().Add(w.ttl)
	}
	w.s.mu.Lock()
	w.s.objects[w.name] = o
	w.s.mu.Unlock()
	return blob.Ref{Name: w.name, Size: int64(len(o.data)), SHA256: hex.EncodeToString(w.sum.Sum(nil))}, nil
}

func (w *writer) Abort(context.Context) error {
	w.done = true
	w.buf = bytes.Buffer{}
	return nil
}

// verifier fails at EOF when the bytes differ from ref.
type verifier struct {
	r   io.Reader
	ref blob.Ref
	sum hash.Hash
	n   int64
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.sum.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if v.n != v.ref.Size || hex.EncodeToString(v.sum.Sum(nil)) != v.ref.SHA256 {
			return n, fmt.Errorf("%w: %s", blob.ErrCorrupt, v.ref.Name)
		}
	}
	return n, err
}
