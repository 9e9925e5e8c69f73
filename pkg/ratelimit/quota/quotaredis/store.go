// Package quotaredis is a quota.DemandStore in Redis or Redis Cluster, so
// that every replica reads the same demands and computes the same shares.
//
// One hash per bucket, <prefix>:q:{<bucket key>}, field = client ID, value =
// "<expiry ms> <demand>". Each call is one Lua script on that one key, so it
// runs unchanged on a cluster (one slot per bucket). The scripts read Redis's
// clock (TIME), so replicas whose clocks disagree still agree on what has
// expired; the now that callers pass is ignored. Demands drops expired fields
// as it reads them, and the key itself expires no sooner than TTL after its
// last report.
//
// Grants (quota.GrantStore) live in a second hash in the same slot,
// <prefix>:q:{<bucket key>}:g, field = client ID, value = "<expiry ms>
// <rate>", written by one script that, for GrowGrant, sums the other live
// grants and caps the new one in the same step, so that two replicas
// growing grants of one bucket at once cannot both take the same room. An
// orphan (a grant whose stream ended) carries its peer as a third field,
// "<expiry ms> <rate> <peer>"; a grant that does not fit takes over the
// smallest orphan of its peer in the same step.
//
// The scripts are safe to run twice (a report rewrites the same demand with
// a later expiry, a read deletes only what has expired, a grant records the
// same rate again, capped against the same others), so go-redis may retry
// them.
package quotaredis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/extauthz/extauthz/internal/keypart"
	"github.com/extauthz/extauthz/internal/redisclient"
	"github.com/extauthz/extauthz/internal/redisscript"
	"github.com/extauthz/extauthz/pkg/ratelimit/quota"
)

var (
	//go:embed report.lua
	reportSrc string
	//go:embed demands.lua
	demandsSrc string
	//go:embed grant.lua
	grantSrc string
	//go:embed orphan.lua
	orphanSrc string

	// The project's one script runner (EVALSHA, then EVAL on NOSCRIPT).
	// Both scripts may run twice harmlessly, but a lost reply is reported
	// to the caller rather than resent behind its back, as everywhere else.
	reportScript  = redisscript.New(reportSrc)
	demandsScript = redisscript.New(demandsSrc)
	grantScript   = redisscript.New(grantSrc)
	orphanScript  = redisscript.New(orphanSrc)
)

// DefaultPrefix starts every key when Options.Prefix is empty, as it does
// the other stores' keys.
const DefaultPrefix = redisclient.DefaultPrefix

// Options configure a Store. The zero value is the defaults.
type Options struct {
	// Prefix starts every key, followed by ":q:"; default "xa". It must not
	// contain '{' or '}', which would move the hash tag.
	Prefix string
	// TTL is how long a report counts; default quota.DefaultTTL, at least
	// one millisecond.
	TTL time.Duration
}

// Store is a quota.DemandStore on Redis. Safe for concurrent use.
type Store struct {
	client redisscript.Processor
	prefix string
	ttlMS  string
	// callerClock (tests only) uses the callers' now instead of Redis's
	// TIME, so that expiry is tested without sleeping.
	callerClock bool
}

var _ quota.DemandStore = (*Store)(nil)

// New returns a Store over client (*redis.Client and *redis.ClusterClient
// fit). It does not contact Redis and does not own the client.
func New(client redisscript.Processor, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("quotaredis: nil client")
	}
	prefix, err := redisclient.KeyPrefix(o.Prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", quota.ErrInvalidOptions, err)
	}
	o.Prefix = prefix
	if o.TTL == 0 {
		o.TTL = quota.DefaultTTL
	}
	if o.TTL < time.Millisecond {
		return nil, fmt.Errorf("%w: TTL must be at least 1ms, got %s", quota.ErrInvalidOptions, o.TTL)
	}
	ttl := strconv.FormatInt(int64((o.TTL+time.Millisecond-1)/time.Millisecond), 10)
	return &Store{client: client, prefix: o.Prefix, ttlMS: ttl}, nil
}

// Key is the Redis key of a bucket: the bucket key escaped (internal/keypart)
// inside the hash tag, so that no bucket key reaches another's hash or slot.
func (s *Store) Key(bucketKey string) string {
	var b strings.Builder
	b.WriteString(s.prefix)
	b.WriteString(":q:{")
	keypart.Write(&b, bucketKey, "%#{}")
	b.WriteByte('}')
	return b.String()
}

// Report records the demand until Redis's now + TTL.
func (s *Store) Report(ctx context.Context, bucketKey, clientID string, demand float64, now time.Time) error {
	demand, err := quota.CheckReport(bucketKey, clientID, demand)
	if err != nil {
		return err
	}
	d := strconv.FormatFloat(demand, 'g', -1, 64) // quota.Unknown is unknownArg
	if err := reportScript.Run(ctx, s.client, []string{s.Key(bucketKey)}, []any{clientID, d, s.ttlMS, s.nowArg(now)}).Err(); err != nil {
		return fmt.Errorf("quotaredis: report: %w", err)
	}
	return nil
}

// Demands returns the demands of bucketKey not expired by Redis's clock.
func (s *Store) Demands(ctx context.Context, bucketKey string, now time.Time) (map[string]float64, error) {
	if bucketKey == "" {
		return nil, quota.ErrInvalid
	}
	v, err := demandsScript.Run(ctx, s.client, []string{s.Key(bucketKey)}, []any{s.nowArg(now)}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("quotaredis: demands: %w", err)
	}
	return parseDemands(v)
}

// GrantKey is the Redis key of a bucket's grants: the bucket's Key with a
// suffix outside the hash tag, so both live in one slot.
func (s *Store) GrantKey(bucketKey string) string { return s.Key(bucketKey) + ":g" }

// GrowGrant records g, capped to what the budget leaves after the other
// clients' grants live by Redis's clock.
func (s *Store) GrowGrant(ctx context.Context, g quota.Grant, budget float64, now time.Time) (float64, error) {
	return s.grant(ctx, g, strconv.FormatFloat(budget, 'g', -1, 64), now)
}

// SetGrant records g as it is.
func (s *Store) SetGrant(ctx context.Context, g quota.Grant, now time.Time) error {
	_, err := s.grant(ctx, g, "", now)
	return err
}

func (s *Store) grant(ctx context.Context, g quota.Grant, budget string, now time.Time) (float64, error) {
	rate, err := quota.CheckGrant(g)
	if err != nil {
		return 0, err
	}
	ttl := strconv.FormatInt(int64((g.TTL+time.Millisecond-1)/time.Millisecond), 10)
	args := []any{g.Client, strconv.FormatFloat(rate, 'g', -1, 64), budget, ttl, s.nowArg(now), g.Peer}
	v, err := grantScript.Run(ctx, s.client, []string{s.GrantKey(g.Bucket)}, args).Result()
	if err != nil {
		return 0, fmt.Errorf("quotaredis: grant: %w", err)
	}
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%w: grant %T", ErrUnexpectedReply, v)
	}
	recorded, err := strconv.ParseFloat(str, 64)
	if err != nil || math.IsNaN(recorded) || recorded < 0 {
		return 0, fmt.Errorf("%w: grant %q", ErrUnexpectedReply, str)
	}
	return recorded, nil
}

// OrphanGrant leaves g.Client's live grant to g.Peer.
func (s *Store) OrphanGrant(ctx context.Context, g quota.Grant, now time.Time) error {
	if g.Bucket == "" || g.Client == "" {
		return quota.ErrInvalid
	}
	if err := orphanScript.Run(ctx, s.client, []string{s.GrantKey(g.Bucket)}, []any{g.Client, g.Peer, s.nowArg(now)}).Err(); err != nil {
		return fmt.Errorf("quotaredis: orphan: %w", err)
	}
	return nil
}

func (s *Store) nowArg(now time.Time) string {
	if !s.callerClock {
		return ""
	}
	return strconv.FormatInt(now.UnixMilli(), 10)
}

// unknownArg is quota.Unknown as Report sends it; report.lua compares the
// demand to it literally: change both together.
const unknownArg = "+Inf"

// ErrUnexpectedReply means Redis answered a script with a reply of the wrong
// shape (another script under the same SHA, a proxy, a corrupt value).
var ErrUnexpectedReply = errors.New("quotaredis: unexpected reply")

// parseDemands reads demands.lua's flat reply, checking every element.
func parseDemands(v any) (map[string]float64, error) {
	if v == nil {
		return map[string]float64{}, nil
	}
	arr, ok := v.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("%w: %T of %d", ErrUnexpectedReply, v, len(arr))
	}
	out := make(map[string]float64, len(arr)/2)
	for i := 0; i < len(arr); i += 2 {
		id, ok1 := arr[i].(string)
		ds, ok2 := arr[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: element %d is %T, %T", ErrUnexpectedReply, i, arr[i], arr[i+1])
		}
		d, err := strconv.ParseFloat(ds, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: demand %q of %q", ErrUnexpectedReply, ds, id)
		}
		out[id] = d
	}
	return out, nil
}

// Scripts returns the sources of the store's scripts, for a warm-up that
// loads them before the first report (redisclient.Warm).
func Scripts() []string {
	return []string{reportScript.Source(), demandsScript.Source(), grantScript.Source(), orphanScript.Source()}
}
