package quota

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucketFor(t *testing.T) {
	t.Parallel()
	const maxU = math.MaxUint32
	deny := TokenBucket{DenyAll: true}
	tb := func(tokens uint32, interval time.Duration, maxTokens uint32) TokenBucket {
		return TokenBucket{TokensPerFill: tokens, FillInterval: interval, MaxTokens: maxTokens}
	}
	tests := []struct {
		name string
		rate float64
		opts BucketOptions
		want TokenBucket
	}{
		{"zero share denies", 0, BucketOptions{}, deny},
		{"negative share denies", -3, BucketOptions{}, deny},
		{"NaN share denies", math.NaN(), BucketOptions{}, deny},
		{"under one token per slow interval denies", 0.016, BucketOptions{}, deny},
		{"one token per slow interval", 0.017, BucketOptions{}, tb(1, time.Minute, 1)},
		{"half a token per second: longer interval, never shorter", 0.5, BucketOptions{}, tb(30, time.Minute, 1)},
		{"fractional rate", 1.5, BucketOptions{}, tb(90, time.Minute, 1)},
		{"whole rate under FastRate", 7, BucketOptions{}, tb(420, time.Minute, 7)},
		{"rounded product would round up: exact floor", 33.3, BucketOptions{}, tb(1997, time.Minute, 33)},
		{"just under FastRate", 999.99, BucketOptions{}, tb(59999, time.Minute, 999)},
		{"FastRate: one-second interval", 1000, BucketOptions{}, tb(1000, time.Second, 1000)},
		{"above FastRate rounds down to whole tokens per second", 1234.7, BucketOptions{}, tb(1234, time.Second, 1234)},
		{"huge rate clamps to uint32", 1e10, BucketOptions{}, tb(maxU, time.Second, maxU)},
		{"infinite rate clamps to uint32", math.Inf(1), BucketOptions{}, tb(maxU, time.Second, maxU)},
		{"longer burst", 7, BucketOptions{Burst: 2 * time.Second}, tb(420, time.Minute, 14)},
		// 0.3 is 0.29999999999999998889... as a float64: 17.99... tokens per minute.
		{"burst of a slow rate is one token", 0.3, BucketOptions{Burst: 2 * time.Second}, tb(17, time.Minute, 1)},
		{"shorter slow interval", 0.5, BucketOptions{SlowInterval: 10 * time.Second}, tb(5, 10*time.Second, 1)},
		{"shorter slow interval denies more", 0.05, BucketOptions{SlowInterval: 10 * time.Second}, deny},
		{"fractional slow interval rounds up", 0.5, BucketOptions{SlowInterval: 1500 * time.Millisecond}, tb(1, 2*time.Second, 1)},
		{"burst under a second takes a second", 7, BucketOptions{Burst: time.Millisecond}, tb(420, time.Minute, 7)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := BucketFor(tc.rate, tc.opts)
			if got != tc.want {
				t.Fatalf("BucketFor(%v) = %+v, want %+v", tc.rate, got, tc.want)
			}
			checkBucket(t, tc.rate, tc.opts, got)
		})
	}
}

// checkBucket asserts what BucketFor promises for any share.
func checkBucket(t *testing.T, rate float64, o BucketOptions, b TokenBucket) {
	t.Helper()
	if b.DenyAll {
		if b != (TokenBucket{DenyAll: true}) {
			t.Fatalf("deny-all bucket with fields set: %+v", b)
		}
		return
	}
	o = o.withDefaults()
	switch {
	case b.FillInterval < time.Second || b.FillInterval%time.Second != 0:
		t.Fatalf("rate %v: interval %s is not whole seconds >= 1s", rate, b.FillInterval)
	case b.FillInterval != time.Second && b.FillInterval != o.SlowInterval:
		t.Fatalf("rate %v: interval %s is neither 1s nor %s", rate, b.FillInterval, o.SlowInterval)
	case b.TokensPerFill < 1 || b.MaxTokens < 1:
		t.Fatalf("rate %v: empty bucket %+v", rate, b)
	}
	// The bucket never fills faster than the share: exactly, in integers
	// where the share is a whole number of tokens per interval.
	if math.FMA(rate, b.FillInterval.Seconds(), -float64(b.TokensPerFill)) < 0 {
		t.Fatalf("rate %v: bucket %+v fills faster than the share", rate, b)
	}
	if b.MaxTokens > 1 && float64(b.MaxTokens) > rate*o.Burst.Seconds() {
		t.Fatalf("rate %v: MaxTokens %d above rate*Burst", rate, b.MaxTokens)
	}
}

// TestBucketForIdentifiesInterval: Envoy 1.40 ignores a new assignment that
// differs from the old only in the seconds of its interval, so equal
// (TokensPerFill, MaxTokens) must mean an equal interval.
func TestBucketForIdentifiesInterval(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, o := range []BucketOptions{{}, {Burst: 3 * time.Second}, {SlowInterval: 2 * time.Second}, {SlowInterval: 1000 * time.Second}} {
		seen := map[[2]uint32]time.Duration{}
		for i := range 200_000 {
			rate := math.Exp(rng.Float64()*16 - 5) // about 0.007 to 60000 per second
			if i%2 == 0 {
				rate = math.Round(rate) // whole rates land on both sides of FastRate
			}
			b := BucketFor(rate, o)
			checkBucket(t, rate, o, b)
			if b.DenyAll {
				continue
			}
			k := [2]uint32{b.TokensPerFill, b.MaxTokens}
			if iv, ok := seen[k]; ok && iv != b.FillInterval {
				t.Fatalf("options %+v: tokens %d max %d with intervals %s and %s", o, k[0], k[1], iv, b.FillInterval)
			}
			seen[k] = b.FillInterval
		}
	}
}

func TestBucketOptionsValidate(t *testing.T) {
	t.Parallel()
	valid := []BucketOptions{{}, {SlowInterval: 2 * time.Second, Burst: time.Second}, {SlowInterval: 1000 * time.Second, Burst: time.Hour}}
	for _, o := range valid {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	invalid := []BucketOptions{
		{SlowInterval: time.Second}, {SlowInterval: 1500 * time.Millisecond}, {SlowInterval: 1001 * time.Second},
		{SlowInterval: -time.Minute}, {Burst: 500 * time.Millisecond}, {Burst: -time.Second},
	}
	for _, o := range invalid {
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%+v: err %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestMaterial(t *testing.T) {
	t.Parallel()
	deny := TokenBucket{DenyAll: true}
	perMin := func(tokens, maxTokens uint32) TokenBucket {
		return TokenBucket{TokensPerFill: tokens, FillInterval: time.Minute, MaxTokens: maxTokens}
	}
	tests := []struct {
		name      string
		old, next TokenBucket
		want      bool
	}{
		{"unchanged", perMin(600, 10), perMin(600, 10), false},
		{"first assignment", TokenBucket{}, perMin(600, 10), true},
		{"first assignment denies", TokenBucket{}, deny, true},
		{"deny to allow", deny, perMin(1, 1), true},
		{"allow to deny", perMin(600, 10), deny, true},
		{"deny stays deny", deny, deny, false},
		{"any decrease", perMin(600, 10), perMin(599, 9), true},
		{"small increase", perMin(600, 10), perMin(660, 11), false},
		{"large increase", perMin(600, 10), perMin(661, 11), true},
		{"burst only", perMin(600, 10), perMin(600, 20), false},
		{"same rate, other interval", perMin(600, 10), TokenBucket{TokensPerFill: 10, FillInterval: time.Second, MaxTokens: 10}, false},
	}
	for _, tc := range tests {
		if got := Material(tc.old, tc.next); got != tc.want {
			t.Errorf("%s: Material(%+v, %+v) = %v, want %v", tc.name, tc.old, tc.next, got, tc.want)
		}
	}
}
