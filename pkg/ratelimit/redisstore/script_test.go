package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// TestSingleAlgorithmScripts: a request whose limits share one algorithm
// runs a script holding only that algorithm's decider; a request that mixes
// algorithms runs decide.lua whole.
func TestSingleAlgorithmScripts(t *testing.T) {
	t.Parallel()
	deciderOf := map[ratelimit.Algorithm]string{
		ratelimit.GCRA: "local function gcra(", ratelimit.FixedWindow: "local function fixedWindow(",
		ratelimit.SlidingWindow: "local function slidingWindow(", ratelimit.SlidingLog: "local function slidingLog(",
	}
	for alg := range algCodes {
		req := ratelimit.Request{Key: "k", Hits: 1, Limits: []ratelimit.Limit{
			limitFor(alg, 10, time.Minute), limitFor(alg, 100, time.Hour),
		}}
		sc := scriptFor(scriptArgs(req, 0))
		for other, decl := range deciderOf {
			if got, want := strings.Contains(sc.Source(), decl), other == alg; got != want {
				t.Errorf("%s script holds %s: %v, want %v", alg, other, got, want)
			}
		}
	}
	for alg := range algCodes {
		one := ratelimit.Request{Key: "k", Hits: 1, Limits: []ratelimit.Limit{limitFor(alg, 10, time.Minute)}}
		sc := scriptFor(scriptArgs(one, 0))
		if want := alg == ratelimit.GCRA || alg == ratelimit.FixedWindow; (sc.SHA() == decideSingle.SHA()) != want {
			t.Errorf("one %s limit runs single.lua: %v, want %v", alg, sc.SHA() == decideSingle.SHA(), want)
		}
	}
	mixed := ratelimit.Request{Key: "k", Hits: 1, Limits: []ratelimit.Limit{
		limitFor(ratelimit.GCRA, 10, time.Minute), limitFor(ratelimit.FixedWindow, 100, time.Hour),
	}}
	if sc := scriptFor(scriptArgs(mixed, 0)); sc.SHA() != decideAll.SHA() {
		t.Errorf("mixed request runs a single-algorithm script")
	}
}
