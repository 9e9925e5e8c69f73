package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is how long a Watcher waits for the files to settle.
const DefaultDebounce = 100 * time.Millisecond

// WatcherOptions configure a Watcher; every field is optional.
type WatcherOptions struct {
	// Debounce is how long the directory must stay quiet after a change
	// before the policy is reloaded, so that a burst of events (an editor's
	// save, a ConfigMap's symlink swap) costs one reload. Default DefaultDebounce.
	Debounce time.Duration
	// OnReload is called with each new policy after a successful reload
	// (not for the first load, and not when no file's bytes changed).
	OnReload func(*Policy)
	// OnError is called with each failed reload, while the last good
	// policy stays in force, and with errors of the file watcher.
	OnError func(error)
	// Load are the options of every load, the first included.
	Load LoadOptions
}

// Watcher holds the current policy and reloads it when its files change.
type Watcher struct {
	path string
	dir  string // watched: path itself, or a file's parent directory
	file string // base name of path when it is a file, else ""
	opts WatcherOptions

	current  atomic.Pointer[Policy]
	reloadMu sync.Mutex // one reload at a time
}

// NewWatcher loads the policy at path (see Load) and returns a Watcher
// serving it; it fails when that first load fails. Call Run to follow changes.
func NewWatcher(path string, opts WatcherOptions) (*Watcher, error) {
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("policy watcher: negative debounce %s", opts.Debounce)
	}
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	p, err := LoadWith(path, opts.Load)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, dir: path, opts: opts}
	if info, err := os.Stat(path); err == nil && !info.IsDir() {
		// A file is watched through its directory: editors replace files by
		// renaming over them, and a ConfigMap swaps a symlink next to them,
		// and neither is seen by a watch on the file itself.
		w.dir, w.file = filepath.Dir(path), filepath.Base(path)
	}
	w.current.Store(p)
	return w, nil
}

// Current returns the policy in force. It is a lock-free atomic load, safe
// on the request path; the Policy returned never changes.
func (w *Watcher) Current() *Policy { return w.current.Load() }

// Reload loads the policy again now. On failure the current policy stays,
// OnError is called and the error returned; on success with changed files
// the new policy replaces it and OnReload is called.
func (w *Watcher) Reload() error {
	w.reloadMu.Lock()
	defer w.reloadMu.Unlock()
	p, err := LoadWith(w.path, w.opts.Load)
	if err != nil {
		if w.opts.OnError != nil {
			w.opts.OnError(err)
		}
		return err
	}
	if p.digest == w.current.Load().digest {
		return nil
	}
	w.current.Store(p)
	if w.opts.OnReload != nil {
		w.opts.OnReload(p)
	}
	return nil
}

// errEventsClosed means fsnotify stopped delivering events.
var errEventsClosed = errors.New("policy watcher: file events closed")

// Run watches the policy's directory and reloads on changes until ctx is
// done (then it returns nil). It returns an error only when watching cannot
// start or stops; call it once. The directory itself must persist (as a
// ConfigMap's mount point does); its content may change in any way.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy watcher: %w", err)
	}
	defer fw.Close()
	if err := fw.Add(w.dir); err != nil {
		return fmt.Errorf("policy watcher: watch %s: %w", w.dir, err)
	}
	// The files may have changed between the first load and the watch.
	_ = w.Reload()
	return w.loop(ctx, fw.Events, fw.Errors)
}

// loop debounces events into reloads.
func (w *Watcher) loop(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error) error {
	timer := time.NewTimer(w.opts.Debounce)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return errEventsClosed
			}
			if w.relevant(ev.Name) {
				timer.Reset(w.opts.Debounce)
			}
		case err, ok := <-errs:
			if !ok {
				return errEventsClosed
			}
			if w.opts.OnError != nil {
				w.opts.OnError(fmt.Errorf("policy watcher: %s: %w", w.dir, err))
			}
			// Events may have been lost (fsnotify.ErrEventOverflow), a
			// change among them: reload to be sure. An unchanged policy
			// reloads quietly.
			timer.Reset(w.opts.Debounce)
		case <-timer.C:
			_ = w.Reload() // failures reach OnError
		}
	}
}

// relevant reports whether an event's file can change the policy: a policy
// file, or a ConfigMap's "..data" machinery. Other names (editors' swap
// files, unrelated files next to a watched file) are ignored.
func (w *Watcher) relevant(name string) bool {
	base := filepath.Base(name)
	if strings.HasPrefix(base, "..") {
		return true
	}
	if w.file != "" {
		return base == w.file
	}
	ext := strings.ToLower(filepath.Ext(base))
	return !strings.HasPrefix(base, ".") && (ext == ".yaml" || ext == ".yml")
}
