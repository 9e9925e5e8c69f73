package quota

import (
	"math"
	"testing"
	"time"
)

func TestMeter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := t0.Add
	type step struct {
		at              time.Duration
		allowed, denied uint64
		want            float64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"first report is unknown: its span is unknown", []step{{0, 1, 0, Unknown}}},
		{"rate over the span since the previous report", []step{
			{0, 1, 0, Unknown}, {5 * time.Second, 40, 10, 10},
		}},
		{"denied requests count: demand is offered load", []step{
			{0, 0, 0, Unknown}, {5 * time.Second, 5, 45, 10},
		}},
		{"rise shows at once", []step{
			{0, 0, 0, Unknown}, {5 * time.Second, 10, 0, 2}, {10 * time.Second, 100, 0, 20},
		}},
		{"fall shows after two reports", []step{
			{0, 0, 0, Unknown}, {5 * time.Second, 100, 0, 20}, {10 * time.Second, 10, 0, 20}, {15 * time.Second, 10, 0, 2},
		}},
		{"quiet client reaches zero after two reports", []step{
			{0, 0, 0, Unknown}, {5 * time.Second, 50, 0, 10}, {10 * time.Second, 0, 0, 10}, {15 * time.Second, 0, 0, 0},
		}},
		{"reports closer than MinSpan accumulate", []step{
			{0, 0, 0, Unknown}, {100 * time.Millisecond, 3, 0, Unknown}, {5 * time.Second, 22, 0, 5},
		}},
		{"uneven spans", []step{
			{0, 0, 0, Unknown}, {2 * time.Second, 8, 0, 4}, {10 * time.Second, 8, 0, 4}, {12 * time.Second, 2, 0, 1},
		}},
		{"clock going back accumulates", []step{
			{10 * time.Second, 0, 0, Unknown}, {5 * time.Second, 7, 0, Unknown}, {15 * time.Second, 43, 0, 10},
		}},
		{"counts saturate", []step{
			{0, 0, 0, Unknown}, {time.Second, math.MaxUint64, math.MaxUint64, math.MaxUint64},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var m Meter
			for i, s := range tc.steps {
				if got := m.Observe(s.allowed, s.denied, at(s.at)); got != s.want {
					t.Fatalf("step %d: Observe(%d, %d, t0+%s) = %v, want %v", i, s.allowed, s.denied, s.at, got, s.want)
				}
				if got := m.Demand(); got != s.want {
					t.Fatalf("step %d: Demand() = %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

// TestMeterMinSpan: a Meter with its own MinSpan samples spans that short
// (package allotment samples every lease, milliseconds apart).
func TestMeterMinSpan(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := Meter{MinSpan: time.Microsecond}
	m.Observe(0, 0, t0)
	if got := m.Observe(50, 0, t0.Add(10*time.Millisecond)); got != 5000 {
		t.Errorf("50 over 10ms: demand %v, want 5000/s", got)
	}
	var d Meter // the default still waits for a whole MinSpan
	d.Observe(0, 0, t0)
	if got := d.Observe(50, 0, t0.Add(10*time.Millisecond)); got != Unknown {
		t.Errorf("default MinSpan: demand %v after 10ms, want Unknown", got)
	}
}
