package redisstore

import (
	"context"
	"testing"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/idempotency"
)

// TestBeginTwiceSameToken: begin.lua run twice with one owner token (a
// re-sent command) answers "acquired" both times; another token is told
// the key is in progress.
func TestBeginTwiceSameToken(t *testing.T) {
	t.Parallel()
	c := redistest.Standalone(t).Client()
	ctx, key := context.Background(), "x:idem:{t|k}"
	fp := idempotency.NewFingerprint("POST", "/", nil, nil).String()
	token := idempotency.NewToken()
	for i := range 2 {
		v, err := beginScript.Run(ctx, c, []string{key}, []any{token, fp, "60000"}).Result()
		if err != nil || v.([]any)[0] != int64(codeAcquired) {
			t.Fatalf("Begin #%d with the same token = %v, %v; want acquired", i+1, v, err)
		}
	}
	v, err := beginScript.Run(ctx, c, []string{key}, []any{idempotency.NewToken(), fp, "60000"}).Result()
	if err != nil || v.([]any)[0] != int64(codeInProgress) {
		t.Fatalf("Begin with another token = %v, %v; want in progress", v, err)
	}
}
