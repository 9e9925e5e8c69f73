package blob

import (
	"context"
	"errors"
	"io"
	"time"
)

// Operations an Observed store reports failures under (a metric's label
// values).
const (
	OpCreate = "create" // Store.Create
	OpWrite  = "write"  // Writer.Write
	OpCommit = "commit" // Writer.Commit
	OpAbort  = "abort"  // Writer.Abort
	OpOpen   = "open"   // Store.Open
	OpRead   = "read"   // reading an opened body (including ErrCorrupt)
	OpDelete = "delete" // Store.Delete
)

// Ops lists every operation, for metrics that show each label from the
// start.
func Ops() []string {
	return []string{OpCreate, OpWrite, OpCommit, OpAbort, OpOpen, OpRead, OpDelete}
}

// Observe returns s with every backend failure of its calls, and of the
// writers and readers it returns, reported to onError with the operation.
// Callers of a Store often degrade quietly when it fails (a large reply
// becomes not replayable, a replay answers 503), so this is where an
// operator learns that object storage is in trouble. A body that is gone
// (ErrNotFound: expired or deleted) and a call whose caller cancelled are
// not failures of the store and are not reported. onError must be safe for
// concurrent use; the store's behaviour is otherwise unchanged.
func Observe(s Store, onError func(op string, err error)) Store {
	return &observed{Store: s, onError: onError}
}

type observed struct {
	Store
	onError func(op string, err error)
}

// report passes err on to onError unless it says nothing about the store.
func (o *observed) report(ctx context.Context, op string, err error) {
	if err == nil || err == io.EOF || errors.Is(err, ErrNotFound) ||
		(errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		return
	}
	o.onError(op, err)
}

func (o *observed) Create(ctx context.Context, name string, ttl time.Duration) (Writer, error) {
	w, err := o.Store.Create(ctx, name, ttl)
	o.report(ctx, OpCreate, err)
	if err != nil {
		return nil, err
	}
	return &observedWriter{Writer: w, o: o, ctx: ctx}, nil
}

func (o *observed) Open(ctx context.Context, ref Ref) (io.ReadCloser, error) {
	r, err := o.Store.Open(ctx, ref)
	o.report(ctx, OpOpen, err)
	if err != nil {
		return nil, err
	}
	return &observedReader{ReadCloser: r, o: o, ctx: ctx}, nil
}

func (o *observed) Delete(ctx context.Context, name string) error {
	err := o.Store.Delete(ctx, name)
	o.report(ctx, OpDelete, err)
	return err
}

// observedWriter reports a writer's failures; Write has no context of its
// own, so it is judged by Create's.
type observedWriter struct {
	Writer
	o   *observed
	ctx context.Context
}

func (w *observedWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	w.o.report(w.ctx, OpWrite, err)
	return n, err
}

func (w *observedWriter) Commit(ctx context.Context) (Ref, error) {
	ref, err := w.Writer.Commit(ctx)
	w.o.report(ctx, OpCommit, err)
	return ref, err
}

func (w *observedWriter) Abort(ctx context.Context) error {
	err := w.Writer.Abort(ctx)
	w.o.report(ctx, OpAbort, err)
	return err
}

// observedReader reports a body's read failures once: a reader repeats
// its error on every later Read.
type observedReader struct {
	io.ReadCloser
	o        *observed
	ctx      context.Context
	reported bool
}

func (r *observedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF && !r.reported {
		r.reported = true
		r.o.report(r.ctx, OpRead, err)
	}
	return n, err
}
