package rlqs

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota/quotaredis"
)

// Two replicas on one Redis are one allocator: an Envoy on each splits the
// budget. The first is pushed its half by its own replica's tick after the
// second reported to the other replica, and only then, the first's grant
// having shrunk in Redis, does the second get its half: never both halves
// on top of the whole.
func TestTwoReplicasShareRedis(t *testing.T) {
	t.Parallel()
	client := redistest.Standalone(t).Client()
	var replicas []*harness
	for range 2 {
		store, err := quotaredis.New(client, quotaredis.Options{Prefix: "t"})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, newHarness(t, Options{Tick: 10 * time.Millisecond}, store))
	}
	a, b := replicas[0].open(t), replicas[1].open(t)
	send(t, a, "quota", usage(acme, 1, 0))
	recvUntil(t, a, tokens{600, time.Minute, 10})
	send(t, b, "quota", usage(acme, 1, 0))
	replicas[0].clock.Add(time.Second) // a's replica re-reads once its cached allocation is a tick old
	recvUntil(t, a, tokens{300, time.Minute, 5})
	recvUntil(t, b, tokens{300, time.Minute, 5})
}
