package region

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/internal/redisscript"
)

var (
	//go:embed global_grant.lua
	globalGrantSrc string

	globalGrantScript = redisscript.New(globalGrantSrc)
)

// Grants are one region's budgets of one key in the global store: Budget
// for window Window and Next for the window after, at generation Gen.
type Grants struct {
	Window, Gen  int64
	Budget, Next int64
}

// For returns the budget for window x (0 outside the two windows held).
func (g Grants) For(x int64) int64 {
	switch x {
	case g.Window:
		return g.Budget
	case g.Window + 1:
		return g.Next
	}
	return 0
}

// View is what one report returns: the global store's clock and, per
// region, its live demand and its grants.
type View struct {
	Now     time.Time
	Demands map[string]float64
	Grants  map[string]Grants
}

// Global is the allocator's state in the Redis designated global. Each
// call is one Lua script on one key. Safe for concurrent use.
type Global struct {
	client redisscript.Processor
	prefix string
	now    clock
}

// NewGlobal returns a Global over client (standalone or cluster) with key
// prefix prefix (default "xa"). It does not contact Redis.
func NewGlobal(client redisscript.Processor, prefix string) (*Global, error) {
	if client == nil {
		return nil, errors.New("region: nil global client")
	}
	p, err := prefixOrDefault(prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return &Global{client: client, prefix: p}, nil
}

// Key is the global hash of a key.
func (g *Global) Key(k string) string { return key(g.prefix, "rgg", k) }

// keyTTL keeps a key's record for as long as any grant in it can matter.
func keyTTL(r Rule, t Topology) time.Duration { return 2*r.Period + t.Lease + 3*t.Interval }

// demandTTL is how long a region's demand counts: three intervals, so one
// lost exchange does not drop it from the division.
func demandTTL(t Topology) time.Duration { return 3 * t.Interval }

// Exchange is an exchange step's one round trip: it records region's
// demand (hits per window; +Inf when not measured yet), moves its grants
// towards ask as Grant does, and returns the grants now held and the key's
// live demands and grants after the call (the region's own among them).
func (g *Global) Exchange(ctx context.Context, k string, r Rule, t Topology, demand float64, ask Ask) (Grants, View, error) {
	d := "inf"
	if !math.IsInf(demand, 1) {
		d = strconv.FormatFloat(math.Max(demand, 0), 'g', -1, 64)
	}
	v, err := globalGrantScript.Run(ctx, g.client, []string{g.Key(k)}, g.grantArgs(r, t, ask, d, ms(demandTTL(t)))).Result()
	if err != nil {
		return Grants{}, View{}, fmt.Errorf("region: global exchange: %w", err)
	}
	a := strs(v)
	if len(a) < 5 {
		return Grants{}, View{}, fmt.Errorf("region: global exchange: malformed reply %q", a)
	}
	gr, err := parseGrantReply(a[:4])
	if err != nil {
		return Grants{}, View{}, fmt.Errorf("region: global exchange: %w", err)
	}
	view, err := parseView(a[4:])
	if err != nil {
		return Grants{}, View{}, fmt.Errorf("region: global exchange: %w", err)
	}
	return gr, view, nil
}

func parseView(a []string) (View, error) {
	if len(a) < 1 || len(a)%2 != 1 {
		return View{}, fmt.Errorf("malformed view %q", a)
	}
	now, err := strconv.ParseInt(a[0], 10, 64)
	if err != nil {
		return View{}, fmt.Errorf("bad clock %q", a[0])
	}
	v := View{Now: time.UnixMilli(now), Demands: map[string]float64{}, Grants: map[string]Grants{}}
	for i := 1; i < len(a); i += 2 {
		field, val := a[i], strings.Fields(a[i+1])
		switch {
		case strings.HasPrefix(field, "d:") && len(val) == 2:
			if d, err := strconv.ParseFloat(val[1], 64); err == nil {
				v.Demands[field[2:]] = d
			}
		case strings.HasPrefix(field, "g:") && len(val) == 4:
			if gr, ok := parseGrants(val); ok {
				v.Grants[field[2:]] = gr
			}
		}
	}
	return v, nil
}

func parseGrants(f []string) (Grants, bool) {
	var n [4]int64
	for i, s := range f {
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Grants{}, false
		}
		n[i] = x
	}
	return Grants{Gen: n[0], Window: n[1], Budget: n[2], Next: n[3]}, true
}

// Ask is what a region asks of the allocator: Want for window Window and
// WantNext for the one after; a value below the current grant shrinks it
// only if the record is still at generation Gen.
type Ask struct {
	Window         int64
	Want, WantNext int64
	Gen            int64
}

// Grant moves region's grants towards ask within the room the other
// regions' grants and floors leave, and returns the grants now held.
func (g *Global) Grant(ctx context.Context, k string, r Rule, t Topology, ask Ask) (Grants, error) {
	v, err := globalGrantScript.Run(ctx, g.client, []string{g.Key(k)}, g.grantArgs(r, t, ask, "", "")).Result()
	if err != nil {
		return Grants{}, fmt.Errorf("region: global grant: %w", err)
	}
	gr, err := parseGrantReply(strs(v))
	if err != nil {
		return Grants{}, fmt.Errorf("region: global grant: %w", err)
	}
	return gr, nil
}

// grantArgs are global_grant.lua's arguments: demand and demandTTL empty
// for a grant that reports nothing. The window after ask's next may grow to
// what the next wants: a call that lands a window later than it was asked
// for (a step across a window boundary) grants its new next window too.
func (g *Global) grantArgs(r Rule, t Topology, ask Ask, demand, demandTTL any) []any {
	return []any{
		t.Region, i64(r.Limit), i64(r.PeriodMS()), ms(t.Lease), i64(r.FloorHits()),
		strings.Join(t.Regions, ","), i64(ask.Want), i64(ask.WantNext), i64(ask.Gen),
		ms(keyTTL(r, t)), g.now.arg(), i64(ask.Window), demand, demandTTL, i64(ask.WantNext),
	}
}

// parseGrantReply reads {window, gen, budget, next}.
func parseGrantReply(a []string) (Grants, error) {
	if len(a) != 4 {
		return Grants{}, fmt.Errorf("malformed reply %q", a)
	}
	gr, ok := parseGrants([]string{a[1], a[0], a[2], a[3]})
	if !ok {
		return Grants{}, fmt.Errorf("malformed reply %q", a)
	}
	return gr, nil
}
