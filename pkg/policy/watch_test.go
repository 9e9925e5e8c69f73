package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// waitFor polls cond until it holds or the deadline passes: file events take
// an unknown few milliseconds to arrive, so tests poll instead of sleeping.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recorder collects a Watcher's callbacks.
type recorder struct {
	reloads atomic.Int32
	mu      sync.Mutex
	errs    []error
}

func (r *recorder) options(debounce time.Duration) WatcherOptions {
	return WatcherOptions{
		Debounce: debounce,
		OnReload: func(*Policy) { r.reloads.Add(1) },
		OnError: func(err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.errs = append(r.errs, err)
		},
	}
}

func (r *recorder) errCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.errs)
}

// run starts w.Run and stops it when the test ends, checking it returns nil.
func run(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	})
}

func requestsOf(t *testing.T, p *Policy, domain, key string) int64 {
	t.Helper()
	m, ok := p.Domain(domain).Match(entries(key, "v"))
	if !ok {
		t.Fatalf("no rule for %s in %s", key, domain)
	}
	return m.Rule.Limits[0].Requests
}

func limitDoc(domain string, requests int) string {
	return "domain: " + domain + "\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: " +
		string(rune('0'+requests)) + "}}]\n"
}

func TestWatcherConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	configMapDir(t, dir, map[string]string{"limits.yaml": limitDoc("a", 1)})
	var rec recorder
	w, err := NewWatcher(dir, rec.options(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	configMapDir(t, dir, map[string]string{"limits.yaml": limitDoc("a", 2)})
	waitFor(t, "the swapped ConfigMap to be loaded", func() bool { return rec.reloads.Load() >= 1 })
	if got := requestsOf(t, w.Current(), "a", "k"); got != 2 {
		t.Errorf("after the swap: %d requests, want 2", got)
	}
	configMapDir(t, dir, map[string]string{"limits.yaml": limitDoc("a", 3), "more.yaml": limitDoc("b", 4)})
	waitFor(t, "the second swap", func() bool { return w.Current().Domain("b") != nil })
	if got := requestsOf(t, w.Current(), "a", "k"); got != 3 || rec.errCount() != 0 {
		t.Errorf("after the second swap: %d requests (want 3), errors %v", got, rec.errs)
	}
}

// TestWatcherBadReloadKeepsLastGood edits a single watched file the way
// editors save (write a temporary file, rename it over the original).
func TestWatcherBadReloadKeepsLastGood(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "policy.yaml", limitDoc("a", 1))
	var rec recorder
	w, err := NewWatcher(path, rec.options(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	replace := func(content string) {
		tmp := writeFile(t, dir, ".policy.yaml.swp", content)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	good := w.Current()
	replace("domain: a\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n")
	waitFor(t, "the bad reload to be reported", func() bool { return rec.errCount() >= 1 })
	rec.mu.Lock()
	reported := rec.errs[0]
	rec.mu.Unlock()
	if !errors.Is(reported, ErrInvalid) || !strings.Contains(reported.Error(), path+":2: descriptors[0].rate_limit.unit") {
		t.Errorf("reported %v, want the problem with file and field", reported)
	}
	if w.Current() != good || rec.reloads.Load() != 0 {
		t.Error("a bad reload replaced the last good policy")
	}
	replace(limitDoc("a", 5))
	waitFor(t, "the fixed file to be loaded", func() bool { return rec.reloads.Load() >= 1 })
	if got := requestsOf(t, w.Current(), "a", "k"); got != 5 {
		t.Errorf("after the fix: %d requests, want 5", got)
	}
}

// TestWatcherDebounce feeds events straight into the loop: a burst shorter
// than the debounce interval must cost exactly one reload. The file is
// invalid so that every reload attempt shows up as an OnError call.
func TestWatcherDebounce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "policy.yaml", limitDoc("a", 1))
	var rec recorder
	w, err := NewWatcher(path, rec.options(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "policy.yaml", "domain: a\nbogus: 1\n")
	events, errs := make(chan fsnotify.Event), make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.loop(ctx, events, errs) }()
	for range 10 {
		events <- fsnotify.Event{Name: path, Op: fsnotify.Write}
	}
	events <- fsnotify.Event{Name: filepath.Join(dir, "notes.txt"), Op: fsnotify.Write} // ignored
	waitFor(t, "the debounced reload", func() bool { return rec.errCount() >= 1 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("loop returned %v after cancel", err)
	}
	if n := rec.errCount(); n != 1 {
		t.Errorf("%d reload attempts for one burst, want 1", n)
	}
}

func TestWatcherReloadUnchangedIsQuiet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "policy.yaml", limitDoc("a", 1))
	var rec recorder
	w, err := NewWatcher(path, rec.options(0))
	if err != nil {
		t.Fatal(err)
	}
	first := w.Current()
	writeFile(t, dir, "policy.yaml", limitDoc("a", 1))
	if err := w.Reload(); err != nil || w.Current() != first || rec.reloads.Load() != 0 {
		t.Errorf("rewriting the same bytes: err %v, replaced %v, OnReload calls %d", err, w.Current() != first, rec.reloads.Load())
	}
}

func TestNewWatcherRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", "domain: a\nnope: 1\n")
	if _, err := NewWatcher(bad, WatcherOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad initial policy: %v, want ErrInvalid", err)
	}
	good := writeFile(t, dir, "good.yaml", "domain: a\n")
	if _, err := NewWatcher(good, WatcherOptions{Debounce: -time.Second}); err == nil {
		t.Error("negative debounce accepted")
	}
}
