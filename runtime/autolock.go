package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// autoUserNSLock lets one `podman create --userns=auto` run at a time on the
// host. Podman 4.3.1 hangs for good, holding every storage lock, when two
// processes allocate auto user namespaces at once (six parallel creates from
// a shell hang in every round here), so a queue inside one driver is not
// enough: the agent, a second agent and a test binary may all create
// containers against the same storage. Goroutines of one driver wait on a
// channel; processes (and drivers) wait on flock(2) of one file, which the
// kernel releases when its holder exits, however it exits.
type autoUserNSLock struct {
	path  string
	local chan struct{}
}

// autoLockPoll bounds how long a waiter sleeps between two tries of the
// file lock: flock(2) cannot be interrupted by a context, so waiting is
// polling with LOCK_NB.
const autoLockPoll = 50 * time.Millisecond

func newAutoUserNSLock(path string) *autoUserNSLock {
	return &autoUserNSLock{path: path, local: make(chan struct{}, 1)}
}

// defaultAutoUserNSLockPath is where drivers that name no lock file meet:
// under /run for root (podman's own run root is there), else under the
// user's runtime directory.
func defaultAutoUserNSLockPath() string {
	dir := "/run"
	if os.Geteuid() != 0 {
		if dir = os.Getenv("XDG_RUNTIME_DIR"); dir == "" {
			dir = os.TempDir()
		}
	}
	return filepath.Join(dir, "kat", "podman-userns-auto.lock")
}

// acquire waits until this caller is the only auto create on the host, or
// ctx ends. The returned func releases the lock.
func (l *autoUserNSLock) acquire(ctx context.Context) (func(), error) {
	select {
	case l.local <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for another create in this process: %w", ctx.Err())
	}
	f, err := l.open()
	if err != nil {
		<-l.local
		return nil, err
	}
	release := func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		_ = f.Close()
		<-l.local
	}
	wait := 5 * time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return release, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			release()
			return nil, fmt.Errorf("lock %s: %w", l.path, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			release()
			return nil, fmt.Errorf("wait for another process's create (lock %s): %w", l.path, ctx.Err())
		}
		wait = min(2*wait, autoLockPoll)
	}
}

// open opens (creating it and its directory if need be) the lock file. It
// does not follow a symlink: the file may live in a shared directory.
func (l *autoUserNSLock) open() (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
		return nil, fmt.Errorf("create the directory of lock %s: %w", l.path, err)
	}
	f, err := os.OpenFile(l.path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", l.path, err)
	}
	return f, nil
}
