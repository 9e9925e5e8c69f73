package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/redistest"
	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// hostile are tenant and descriptor values that try to break out of the hash
// tag, forge a separator or blow up the key size.
var hostile = []string{
	"", "{", "}", "{}", "}{", "a}b{c", ":", "::", "|", "||", "=", "%", "%7B", "#",
	"\n", "a\nb", "\r\n", "\x00", "\xff\xfe", "caf\xc3", "é", "{tenant}", "x}:gcra:1000",
	strings.Repeat("a", 10*1024), strings.Repeat("a", 10*1024-1) + "b", strings.Repeat("{", 10*1024),
	"#" + strings.Repeat("0", 64),
}

// hostileIdentities builds distinct identities both through ratelimit.Key
// (as the service does) and raw, as a caller of the Store might pass them.
func hostileIdentities() []string {
	seen := map[string]bool{}
	var ids []string
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, v := range hostile {
		add(v)
		add(ratelimit.Key(v, "api", nil))
		add(ratelimit.Key("t", v, nil))
		add(ratelimit.Key("t", "api", []ratelimit.Entry{{Key: v, Value: "x"}}))
		add(ratelimit.Key("t", "api", []ratelimit.Entry{{Key: "user", Value: v}}))
		add(ratelimit.Key("t", "api", []ratelimit.Entry{{Key: "a", Value: v}, {Key: "b", Value: v}}))
	}
	return ids
}

// TestHostileIdentitiesNeverShareState: with a limit of one hit per hour,
// the first call of every distinct identity must be admitted (a shared key
// would deny the second), on a standalone server and on a cluster (where a
// broken hash tag would also raise CROSSSLOT for a multi-limit request).
func TestHostileIdentitiesNeverShareState(t *testing.T) {
	t.Parallel()
	ids := hostileIdentities()
	limits := []ratelimit.Limit{
		limitFor(ratelimit.SlidingLog, 1, time.Hour),
		limitFor(ratelimit.FixedWindow, 1, time.Hour),
	}
	check := func(t *testing.T, s *Store) {
		reqs := make([]ratelimit.Request, len(ids))
		for i, id := range ids {
			reqs[i] = ratelimit.Request{Key: id, Limits: limits, Hits: 1}
		}
		for round, want := range []bool{true, false} {
			d, err := s.AllowBatch(context.Background(), reqs)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			for i := range d {
				if d[i].Allowed != want {
					t.Fatalf("round %d identity %q: allowed %v, want %v", round, short(ids[i]), d[i].Allowed, want)
				}
			}
		}
	}
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		_, c := standalone(t)
		check(t, newStore(t, c))
		assertAllKeysHaveTTL(t, c)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cc := redistest.NewCluster(t).Client()
		check(t, newStore(t, cc))
	})
}

// TestKeysAreDistinctBoundedAndTagged checks the key function directly: no
// two identities share a key, each key has exactly one hash tag, and keys
// stay short whatever the input.
func TestKeysAreDistinctBoundedAndTagged(t *testing.T) {
	t.Parallel()
	l := limitFor(ratelimit.GCRA, 1, time.Second)
	seen := map[string]string{}
	for _, id := range hostileIdentities() {
		k := stateKey(DefaultPrefix, tagIdentity(id), l)
		if prev, dup := seen[k]; dup {
			t.Fatalf("identities %q and %q share key %q", short(prev), short(id), short(k))
		}
		seen[k] = id
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
			t.Errorf("key %q must hold exactly one '{' and one '}'", short(k))
		}
		if len(k) > MaxIdentityLen+64 {
			t.Errorf("key of %d bytes, want at most %d", len(k), MaxIdentityLen+64)
		}
	}
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}
