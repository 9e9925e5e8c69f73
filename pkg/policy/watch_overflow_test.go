package policy

import (
	"context"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// TestWatcherReloadsAfterLostEvents: when the kernel's event queue
// overflows, the events of a change may be among those dropped, so the
// watcher cannot know whether the files changed and must reload anyway;
// otherwise the change is never picked up until some later event.
func TestWatcherReloadsAfterLostEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "policy.yaml", limitDoc("a", 1))
	var rec recorder
	w, err := NewWatcher(path, rec.options(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "policy.yaml", limitDoc("a", 2)) // its events were lost
	events, errs := make(chan fsnotify.Event), make(chan error)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.loop(ctx, events, errs) }()
	errs <- fsnotify.ErrEventOverflow
	waitFor(t, "a reload after the overflow", func() bool { return rec.reloads.Load() == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("loop returned %v after cancel", err)
	}
	if got := requestsOf(t, w.Current(), "a", "k"); got != 2 {
		t.Errorf("requests_per_unit after the overflow: %d, want 2", got)
	}
	if rec.errCount() != 1 {
		t.Errorf("OnError calls: %d, want 1 (the overflow)", rec.errCount())
	}
}
