package filewatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
)

// ErrNotLoaded is returned by Value.Get when the files never held a good
// value.
var ErrNotLoaded = errors.New("filewatch: no good value loaded")

// Value is a value parsed from files, kept current as they change (see the
// package documentation). Its methods may be called from any goroutine.
type Value[T any] struct {
	cfg   Config
	parse func(data [][]byte) (T, error)

	mu  sync.Mutex
	cur T
	ok  bool
	// sum is the digest of the files' contents cur was parsed from.
	sum [sha256.Size]byte
	// stamp identifies the files as the last load found them.
	stamp string
	// err is the last load's error; nil when cur is what the files hold.
	err error
}

// NewValue returns a Value of cfg.Files, loaded now. parse receives the
// files' contents in the order of cfg.Files; its error need not name the
// files, the Value's errors do. A first load that fails is logged, and Get
// reports it until the files are good.
func NewValue[T any](cfg Config, parse func(data [][]byte) (T, error)) *Value[T] {
	v := &Value[T]{cfg: cfg.withDefaults(), parse: parse}
	v.Reload()
	return v
}

// Get returns the current value: it loads the files again first when they
// changed since the last load. When they cannot be loaded it returns the
// last good value and a nil error; with no good value ever, the load's
// error (which matches ErrNotLoaded).
func (v *Value[T]) Get() (T, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if stamp := v.stampFiles(); stamp != v.stamp {
		v.load(stamp)
	}
	if !v.ok {
		var zero T
		return zero, v.err
	}
	return v.cur, nil
}

// Err returns why the files' current content is not in use (nil when it
// is): an unreadable file or a parse error, naming the files.
func (v *Value[T]) Err() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

// Reload loads the files now, whether or not they look changed.
func (v *Value[T]) Reload() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.load(v.stampFiles())
}

// Run reloads the value as the watch (Run) reports changes, until ctx
// ends.
func (v *Value[T]) Run(ctx context.Context) error {
	return Run(ctx, v.cfg, v.Reload)
}

// load reads and parses the files; stamp, taken before reading, is what
// the next Get compares with. v.mu is held.
func (v *Value[T]) load(stamp string) {
	v.stamp = stamp
	data := make([][]byte, len(v.cfg.Files))
	h := sha256.New()
	for i, f := range v.cfg.Files {
		b, err := os.ReadFile(f)
		if err != nil {
			v.failed(fmt.Errorf("read %s: %w", f, err))
			return
		}
		data[i] = b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if v.ok && bytes.Equal(sum[:], v.sum[:]) {
		v.recovered(false)
		return // touched, not changed
	}
	val, err := v.parse(data)
	if err != nil {
		v.failed(fmt.Errorf("load %s: %w", strings.Join(v.cfg.Files, ", "), err))
		return
	}
	first := !v.ok
	v.cur, v.sum, v.ok = val, sum, true
	v.recovered(!first)
}

func (v *Value[T]) failed(err error) {
	again := v.err != nil && v.err.Error() == err.Error()
	if !v.ok {
		v.err = fmt.Errorf("%w: %w", ErrNotLoaded, err)
	} else {
		v.err = err
	}
	if again {
		return
	}
	if v.ok {
		v.cfg.Logger.Error().Err(err).Strs("files", v.cfg.Files).Msg("files changed but cannot be loaded; keeping the last good value")
		return
	}
	v.cfg.Logger.Error().Err(err).Strs("files", v.cfg.Files).Msg("cannot load files")
}

func (v *Value[T]) recovered(changed bool) {
	if v.err == nil && !changed {
		return
	}
	v.err = nil
	v.cfg.Logger.Info().Strs("files", v.cfg.Files).Msg("files reloaded")
}

// stampFiles identifies the files' current versions: device, inode, size,
// modification and change times (following symlinks), or the error of
// each stat. A rename over a file, a write, a chmod and a swapped symlink
// all change it.
func (v *Value[T]) stampFiles() string {
	var b strings.Builder
	for _, f := range v.cfg.Files {
		fi, err := os.Stat(f)
		if err != nil {
			fmt.Fprintf(&b, "%s;", err)
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			fmt.Fprintf(&b, "%d.%d.%d.%d.%d.%d.%d;", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
			continue
		}
		fmt.Fprintf(&b, "%d.%d.%s;", fi.Size(), fi.ModTime().UnixNano(), fi.Mode())
	}
	return b.String()
}
