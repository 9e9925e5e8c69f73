package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/s3test"
	"github.com/extauthz/extauthz/test/e2e/upstream"
)

// blobPolicy is the e2e policy with the idempotency routes' inline limit
// lowered to 64 KiB, so that a reply of a few hundred KiB is kept in object
// storage (and replayed through the replay endpoint) rather than in Redis.
const blobPolicy = `
http:
  tenant: {header: x-tenant-id, default: anonymous}
  routes:
    - name: orders
      path_prefix: /orders
      idempotency: {key_required: true, lease_ttl: 12s, record_ttl: 1h, max_body_bytes: 65536}
    - name: payments
      path_prefix: /payments
      idempotency: {key_required: true, lease_ttl: 12s, record_ttl: 1h, max_body_bytes: 65536}
`

// newBlobStack is the front proxy with two extauthz replicas sharing a
// replay secret, Redis, and a real S3-compatible server (moto).
func newBlobStack(t *testing.T) (*stack, *s3test.Server) {
	t.Helper()
	return newBlobStackOn(t, s3test.Shared(t))
}

// newBlobStackOn is newBlobStack on a given moto server.
func newBlobStackOn(t *testing.T, moto *s3test.Server) (*stack, *s3test.Server) {
	t.Helper()
	bucket := moto.NewBucket(t)
	dir := t.TempDir()
	edge, err := os.ReadFile(filepath.Join(deps.root, "test", "e2e", "testdata", "policy", "edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"edge.yaml": edge, "http.yaml": []byte(blobPolicy)} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := newStack(t, stackOpts{policy: dir, env: []string{
		"EXTAUTHZ_BLOB_S3_ENDPOINT=" + moto.Endpoint,
		"EXTAUTHZ_BLOB_S3_BUCKET=" + bucket,
		"EXTAUTHZ_BLOB_S3_REGION=" + s3test.Region,
		"EXTAUTHZ_BLOB_S3_PART_SIZE=5242880",
		"EXTAUTHZ_REPLAY_SECRET=" + strings.Repeat("e2e-shared-secret-", 3),
		"AWS_ACCESS_KEY_ID=" + s3test.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + s3test.SecretAccessKey,
	}})
	return s, moto
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// A reply larger than max_body_bytes goes to object storage; the retry
// gets it byte for byte from the replay endpoint (on either replica:
// tickets are signed with the shared secret), marked Idempotent-Replayed,
// and the upstream runs once. Both wirings.
func TestLargeReplyReplayedFromObjectStorage(t *testing.T) {
	s, _ := newBlobStack(t)
	const size = 768 << 10
	for _, w := range []wiring{wiringB, wiringA} {
		t.Run(w.name, func(t *testing.T) {
			tenant, key := uniq("tb"), uniq("key")
			r := post(w, tenant, key, `{"big":true}`, upstream.HeaderSize, strconv.Itoa(size), upstream.HeaderStatus, "201")
			first := s.do(t, r)
			if first.status != http.StatusCreated || len(first.body) != size {
				t.Fatalf("first: %d with %d bytes, want 201 with %d", first.status, len(first.body), size)
			}
			for i := 0; i < 3; i++ { // round-robin over both replicas' endpoints
				again := s.do(t, r)
				if again.status != http.StatusCreated || sha256Hex(again.body) != sha256Hex(first.body) {
					t.Fatalf("retry %d: %d with %d bytes (sha %s), want 201 with the first reply's %d bytes (sha %s)",
						i, again.status, len(again.body), sha256Hex(again.body), len(first.body), sha256Hex(first.body))
				}
				if again.header.Get("Idempotent-Replayed") != "true" || again.header.Get("Content-Type") != "application/octet-stream" {
					t.Errorf("retry %d headers %v, want Idempotent-Replayed: true and the stored Content-Type", i, again.header)
				}
			}
			if n := s.up.Executions(tenant, key); n != 1 {
				t.Errorf("upstream executed %d times, want 1", n)
			}
		})
	}
}

// A client cannot reach the replay endpoint by sending the ticket header
// itself: Envoy removes it before routing, so the request is an ordinary
// one (here: a new key, executed once).
func TestClientReplayHeaderIsStripped(t *testing.T) {
	s, _ := newBlobStack(t)
	tenant, key := uniq("tb"), uniq("key")
	r := post(wiringB, tenant, key, `{}`, "x-extauthz-replay", "forged.ticket")
	if got := s.do(t, r); got.status != http.StatusOK || got.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("got %s, want the upstream's fresh 200", got)
	}
	if n := s.up.Executions(tenant, key); n != 1 {
		t.Errorf("upstream executed %d times, want 1", n)
	}
}

// Replies of 2 MiB and 20 MiB (ext_proc STREAMED response bodies): the first
// call delivers the whole body, the retry gets it byte for byte from object
// storage, the upstream runs once; 100 MiB + 1 byte (above the default
// max_stored_body_bytes) is delivered once and then answered
// idempotency-response-not-replayable, never run again. Both wirings.
func TestHugeRepliesStreamed(t *testing.T) {
	s, _ := newBlobStack(t)
	for _, w := range []wiring{wiringB, wiringA} {
		for _, size := range []int{2 << 20, 20 << 20, 100<<20 + 1} {
			t.Run(w.name+"/"+strconv.Itoa(size), func(t *testing.T) {
				tenant, key := uniq("th"), uniq("key")
				r := post(w, tenant, key, `{"huge":true}`, upstream.HeaderSize, strconv.Itoa(size), upstream.HeaderStatus, "201")
				start := time.Now()
				first := s.do(t, r)
				capture := time.Since(start)
				if first.status != http.StatusCreated || len(first.body) != size {
					t.Fatalf("first: %d with %d bytes, want 201 with %d", first.status, len(first.body), size)
				}
				start = time.Now()
				again := s.do(t, r)
				replay := time.Since(start)
				if size > 100<<20 {
					if again.status != http.StatusConflict || !strings.Contains(string(again.body), "idempotency-response-not-replayable") {
						t.Fatalf("retry above the cap: %s, want 409 idempotency-response-not-replayable", again)
					}
				} else if again.status != http.StatusCreated || sha256Hex(again.body) != sha256Hex(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
					t.Fatalf("retry: %d with %d bytes, replayed %q; want the first reply byte for byte, replayed true",
						again.status, len(again.body), again.header.Get("Idempotent-Replayed"))
				}
				if n := s.up.Executions(tenant, key); n != 1 {
					t.Errorf("upstream executed %d times, want 1", n)
				}
				mb := float64(size) / (1 << 20)
				t.Logf("%s %d bytes: first call (capture) %v = %.1f MiB/s; retry (replay) %v = %.1f MiB/s",
					w.name, size, capture, mb/capture.Seconds(), replay, mb/replay.Seconds())
			})
		}
	}
	t.Logf("peak RSS: envoy %s", peakRSS(s.envoy))
	for _, r := range s.replicas {
		t.Logf("peak RSS: %s %s", r.name, peakRSS(r.proc))
	}
}

// Object storage down while a large reply is captured: the client still
// gets the reply, the key completes not replayable (the route's
// failure_mode applies to the record store, which is up), and the retry is
// 409, never a second execution. Both wirings.
func TestObjectStorageDown(t *testing.T) {
	moto := s3test.Start(t)
	s, _ := newBlobStackOn(t, moto)
	moto.Stop()
	for _, w := range []wiring{wiringB, wiringA} {
		t.Run(w.name, func(t *testing.T) {
			tenant, key := uniq("td"), uniq("key")
			r := post(w, tenant, key, `{}`, upstream.HeaderSize, strconv.Itoa(2<<20), upstream.HeaderStatus, "201")
			first := s.do(t, r)
			if first.status != http.StatusCreated || len(first.body) != 2<<20 {
				t.Fatalf("first: %d with %d bytes, want the upstream's 201 with 2 MiB", first.status, len(first.body))
			}
			again := s.do(t, r)
			if again.status != http.StatusConflict || !strings.Contains(string(again.body), "idempotency-response-not-replayable") {
				t.Fatalf("retry: %s, want 409 idempotency-response-not-replayable", again)
			}
			if n := s.up.Executions(tenant, key); n != 1 {
				t.Errorf("upstream executed %d times, want 1", n)
			}
		})
	}
}
