// Package blobtest is an in-memory blob.Store for unit tests of the code
// that captures bodies (pkg/envoy): it keeps committed objects in a map and
// can be told to fail. Integration tests use a real S3-compatible server.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// ErrDown is what a failing Store answers.
var ErrDown = errors.New("blobtest: store down")

// Store is an in-memory blob.Store.
type Store struct {
	// Fail makes every Create, Write and Commit fail with ErrDown.
	Fail atomic.Bool

	mu      sync.Mutex
	objects map[string][]byte
	aborted int
	deleted []string
}

var _ blob.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store { return &Store{objects: map[string][]byte{}} }

// Object returns a committed object's bytes.
func (s *Store) Object(name string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[name]
	return b, ok
}

// Len is the number of committed objects.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Aborted is the number of writers aborted.
func (s *Store) Aborted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aborted
}

// Create implements blob.Store.
func (s *Store) Create(_ context.Context, name string, _ time.Duration) (blob.Writer, error) {
	if s.Fail.Load() {
		return nil, ErrDown
	}
	return &writer{s: s, name: name}, nil
}

// Open implements blob.Store.
func (s *Store) Open(_ context.Context, ref blob.Ref) (io.ReadCloser, error) {
	b, ok := s.Object(ref.Name)
	if !ok {
		return nil, blob.ErrNotFound
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, blob.ErrCorrupt
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Delete implements blob.Store.
func (s *Store) Delete(_ context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, name)
	s.deleted = append(s.deleted, name)
	return nil
}

// Close implements blob.Store.
func (s *Store) Close() error { return nil }

type writer struct {
	s    *Store
	name string
	buf  bytes.Buffer
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	if w.s.Fail.Load() {
		return 0, ErrDown
	}
	return w.buf.Write(p)
}

func (w *writer) Commit(context.Context) (blob.Ref, error) {
	if w.s.Fail.Load() {
		return blob.Ref{}, ErrDown
	}
	b := append([]byte(nil), w.buf.Bytes()...)
	sum := sha256.Sum256(b)
	w.s.mu.Lock()
	w.s.objects[w.name], w.done = b, true
	w.s.mu.Unlock()
	return blob.Ref{Name: w.name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}, nil
}

func (w *writer) Abort(context.Context) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if !w.done {
		w.s.aborted++
		w.done = true
	}
	return nil
}
