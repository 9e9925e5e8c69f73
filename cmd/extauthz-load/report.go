package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// report is what a run measured.
type report struct {
	Requests  int64         `json:"requests"`
	OK        int64         `json:"ok"`
	Over      int64         `json:"over_limit"`
	Errors    int64         `json:"errors"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	PerSecond float64       `json:"requests_per_second"`
	P50       time.Duration `json:"p50_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	FirstErr  string        `json:"first_error,omitempty"`
}

func summarize(tallies []tally, elapsed time.Duration) report {
	var r report
	var all []time.Duration
	for _, t := range tallies {
		r.OK += t.ok
		r.Over += t.over
		r.Errors += t.failed
		all = append(all, t.latencies...)
		if t.firstErr != nil && r.FirstErr == "" {
			r.FirstErr = t.firstErr.Error()
		}
	}
	r.Requests = r.OK + r.Over + r.Errors
	r.Elapsed = elapsed
	if elapsed > 0 {
		r.PerSecond = float64(r.Requests) / elapsed.Seconds()
	}
	slices.Sort(all)
	r.P50, r.P99 = percentile(all, 50), percentile(all, 99)
	if len(all) > 0 {
		r.Max = all[len(all)-1]
	}
	return r
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

func (r report) write(w io.Writer, cfg config) error {
	if cfg.jsonOut {
		return json.NewEncoder(w).Encode(r)
	}
	_, err := fmt.Fprintf(w,
		"addr=%s keys=%d concurrency=%d duration=%s\n"+
			"requests=%d rps=%.0f p50=%s p99=%s max=%s ok=%d over_limit=%d errors=%d\n",
		cfg.addr, cfg.keys, cfg.concurrency, r.Elapsed.Round(time.Millisecond),
		r.Requests, r.PerSecond, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond),
		r.Max.Round(time.Microsecond), r.OK, r.Over, r.Errors)
	if err == nil && r.FirstErr != "" {
		_, err = fmt.Fprintf(w, "first error: %s\n", r.FirstErr)
	}
	return err
}
