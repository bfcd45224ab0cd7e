package filewatch

import (
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// Defaults of Config.
const (
	DefaultDebounce = 100 * time.Millisecond
	DefaultFallback = 10 * time.Second
)

// Config says which files to watch and how.
type Config struct {
	// Files are the files to watch. Paths are made absolute; a file need
	// not exist yet. Files or Dirs is required.
	Files []string
	// Dirs are directories every entry of which is watched (a file added,
	// changed, renamed or removed in them), not recursively. Paths are
	// made absolute; a directory need not exist yet.
	Dirs []string
	// Debounce is how long after the first event of a burst the callback
	// runs, so that a burst makes one call. Default DefaultDebounce.
	Debounce time.Duration
	// Fallback is how often, while a directory cannot be watched, the
	// watch is tried again and the callback runs anyway (polling). Default
	// DefaultFallback.
	Fallback time.Duration
	// Logger receives the watch's failures and recoveries.
	Logger zerolog.Logger
	// Synced, when set, is called on Run's goroutine after every sync of
	// the watch with whether every directory is watched: a test waits on
	// it before making a change the watch must report.
	Synced func(complete bool)
}

func (c Config) withDefaults() Config {
	if c.Debounce <= 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Fallback <= 0 {
		c.Fallback = DefaultFallback
	}
	c.Files, c.Dirs = absolute(c.Files), absolute(c.Dirs)
	return c
}

// absolute returns paths made absolute and clean.
func absolute(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, f := range paths {
		if abs, err := filepath.Abs(f); err == nil {
			f = abs
		}
		out = append(out, filepath.Clean(f))
	}
	return out
}

// Run watches cfg.Files until ctx ends and calls onChange after each burst
// of changes to them (see the package documentation). onChange runs on
// Run's goroutine, one call at a time; it should be quick (a non-blocking
// wake-up or a reload). Run returns nil when ctx ends.
func Run(ctx context.Context, cfg Config, onChange func()) error {
	w := &watcher{cfg: cfg.withDefaults(), failed: map[string]string{}}
	defer w.close()
	w.sync()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	fallback := time.NewTicker(w.cfg.Fallback)
	defer fallback.Stop()
	pending := false
	wake := func() {
		if !pending {
			pending = true
			debounce.Reset(w.cfg.Debounce)
		}
	}
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if w.fs != nil {
			events, errs = w.fs.Events, w.fs.Errors
		}
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				w.close() // made again by the next sync
				wake()
				continue
			}
			if w.concerns(ev) {
				wake()
			}
		case err, ok := <-errs:
			if ok {
				// An overflow or a read error: events may be lost, so
				// look again.
				w.cfg.Logger.Warn().Err(err).Strs("files", w.cfg.Files).Msg("file watch reported an error; checking the files")
			}
			wake()
		case <-debounce.C:
			pending = false
			w.sync() // a directory may have appeared, or a symlink moved
			onChange()
		case <-fallback.C:
			if w.degraded() {
				w.sync()
				onChange()
			}
		}
	}
}

// watcher is Run's state; only Run's goroutine uses it.
type watcher struct {
	cfg Config
	fs  *fsnotify.Watcher // nil while it cannot be made
	// dirs are the watched directories and names the base names that
	// concern the files, as the last sync computed them; whole are the
	// directories (Config.Dirs) every entry of which concerns.
	dirs  map[string]bool
	names map[string]bool
	whole map[string]bool
	// failed holds, per directory (or "" for the watcher itself), the
	// error last logged for it: a retry failing the same way logs nothing.
	failed map[string]string
}

func (w *watcher) close() {
	if w.fs != nil {
		_ = w.fs.Close()
		w.fs = nil
	}
}

// degraded reports whether some directory is not watched.
func (w *watcher) degraded() bool { return len(w.failed) > 0 }

// sync makes the watch match the files: the directories of the files and
// of their symlink targets are watched, no other.
func (w *watcher) sync() {
	if w.cfg.Synced != nil {
		defer func() { w.cfg.Synced(!w.degraded()) }()
	}
	w.dirs, w.names, w.whole = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, d := range w.cfg.Dirs {
		w.dirs[d], w.whole[d] = true, true
		if t, err := filepath.EvalSymlinks(d); err == nil && t != d {
			w.dirs[t], w.whole[t] = true, true
		}
	}
	for _, f := range w.cfg.Files {
		w.dirs[filepath.Dir(f)], w.names[filepath.Base(f)] = true, true
		if t, err := filepath.EvalSymlinks(f); err == nil && t != f {
			w.dirs[filepath.Dir(t)], w.names[filepath.Base(t)] = true, true
		}
	}
	if w.fs == nil {
		fs, err := fsnotify.NewWatcher()
		if err != nil {
			w.fail("", err)
			return
		}
		w.recover("")
		w.fs = fs
	}
	for _, d := range w.fs.WatchList() {
		if !w.dirs[d] {
			_ = w.fs.Remove(d)
		}
	}
	watched := w.fs.WatchList()
	for _, d := range slices.Sorted(maps.Keys(w.dirs)) {
		if slices.Contains(watched, d) {
			w.recover(d)
			continue
		}
		if err := w.fs.Add(d); err != nil {
			w.fail(d, err)
			continue
		}
		w.recover(d)
	}
	for d := range w.failed {
		if d != "" && !w.dirs[d] {
			delete(w.failed, d)
		}
	}
}

func (w *watcher) fail(dir string, err error) {
	if w.failed[dir] == err.Error() {
		return
	}
	w.failed[dir] = err.Error()
	ev := w.cfg.Logger.Warn().Err(err).Strs("files", w.cfg.Files).Strs("dirs", w.cfg.Dirs).Dur("poll_interval", w.cfg.Fallback)
	if dir == "" {
		ev.Msg("cannot watch files for changes; polling them instead")
		return
	}
	ev.Str("dir", dir).Msg("cannot watch a directory for changes; polling instead")
}

func (w *watcher) recover(dir string) {
	if _, ok := w.failed[dir]; !ok {
		return
	}
	delete(w.failed, dir)
	w.cfg.Logger.Info().Str("dir", dir).Strs("files", w.cfg.Files).Strs("dirs", w.cfg.Dirs).Msg("watching for changes again")
}

// concerns reports whether ev may change one of the files: an event on one
// of their names, on a Kubernetes "..data"-style name, in a directory of
// Config.Dirs, or on a watched directory itself (removed or moved: the
// watch must be made again).
func (w *watcher) concerns(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	base := filepath.Base(name)
	return w.names[base] || strings.HasPrefix(base, "..") || w.dirs[name] || w.whole[filepath.Dir(name)]
}
