package authz

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/extauthz/extauthz/pkg/idempotency"
	"github.com/extauthz/extauthz/pkg/idempotency/blob"
)

// capture is a response being kept as it streams through: inline up to the
// route's max_body_bytes, then spilled to the blob store (w) up to
// max_stored_body_bytes.
type capture struct {
	status  int
	headers headerList
	body    []byte      // inline bytes, nil once spilled
	size    int64       // bytes seen
	w       blob.Writer // set once the body outgrew max_body_bytes
}

// abort discards a spilled body; safe to call twice.
func (c *capture) abort(ctx context.Context) {
	if c.w != nil {
		_ = c.w.Abort(context.WithoutCancel(ctx)) // best effort; the object also expires
		c.w = nil
	}
}

// keepable is the largest body the stream can keep: max_stored_body_bytes
// with a blob store, else max_body_bytes.
func (st *procStream) keepable() int64 {
	if st.s.opts.blobs == nil {
		return st.id.MaxBodyBytes
	}
	return max(st.id.MaxStoredBodyBytes, st.id.MaxBodyBytes)
}

// add captures one chunk. It reports false when the body cannot be kept
// (too large, or the blob store failed): the lease is then settled as not
// replayable, since the upstream has acted.
func (st *procStream) add(p []byte) bool {
	c := st.capture
	c.size += int64(len(p))
	switch {
	case c.size > st.keepable():
		st.notKept(c.status, idempotency.EventTooLarge)
		return false
	case c.w == nil && c.size <= st.id.MaxBodyBytes:
		c.body = append(c.body, p...)
		return true
	case c.w == nil && !st.spill():
		st.event(idempotency.EventStoreError)
		st.notKept(c.status, idempotency.EventNotKept)
		return false
	}
	if _, err := c.w.Write(p); err != nil {
		st.event(idempotency.EventStoreError)
		st.notKept(c.status, idempotency.EventNotKept)
		return false
	}
	return true
}

// spill starts the blob for a body that outgrew max_body_bytes and moves
// the inline bytes into it.
func (st *procStream) spill() bool {
	c, l := st.capture, st.lease
	// The object lives at least as long as the record it backs.
	w, err := st.s.opts.blobs.Create(st.ctx, blobName(*l), l.TTLs.Record+l.TTLs.Lease)
	if err != nil {
		return false
	}
	c.w = w
	if _, err := w.Write(c.body); err != nil {
		return false
	}
	c.body = nil
	return true
}

// blobName names a lease's body object: the hash of its record's storage
// key (no client bytes in object names) and the owner token, so that a
// stale owner never overwrites the body a newer owner's record refers to.
func blobName(l idempotency.Lease) string {
	sum := sha256.Sum256([]byte(idempotency.StorageKey(l.Scope, l.Key)))
	return "idem/" + hex.EncodeToString(sum[:]) + "/" + l.Token
}

// deleteBlob removes a body no record refers to (best effort: it also
// expires with its TTL).
func (st *procStream) deleteBlob(name string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(st.ctx), st.s.gate.timeout)
	defer cancel()
	_ = st.s.opts.blobs.Delete(ctx, name)
}
