package filewatch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/internal/poll/polltest"
)

const waitFor = 30 * time.Second

// run runs Run over files until the test ends and returns a counter of
// its callbacks.
func run(t *testing.T, cfg Config) *atomic.Int64 {
	t.Helper()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t))
	var calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, func() { calls.Add(1) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &calls
}

// watched returns a Config hook that records that the watch was set up
// completely, and a wait for it.
func watched(t *testing.T, cfg *Config) (wait func()) {
	t.Helper()
	var ok atomic.Bool
	cfg.Synced = func(complete bool) {
		if complete {
			ok.Store(true)
		}
	}
	return func() {
		t.Helper()
		polltest.Until(t, waitFor, "the watch set up", ok.Load)
	}
}

// runValue runs v's watch until the test ends.
func runValue[T any](t *testing.T, v *Value[T]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// current is v's value as the last load left it, without a Get (which
// would look at the files itself).
func current[T any](v *Value[T]) T {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cur
}

// waitCall makes a change and waits until the watch calls back after it.
func waitCall(t *testing.T, calls *atomic.Int64, what string, change func()) {
	t.Helper()
	before := calls.Load()
	change()
	polltest.Until(t, waitFor, "a callback after "+what, func() bool { return calls.Load() > before })
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replace writes path the way atomic writers do: a temporary file renamed
// over it.
func replace(t *testing.T, path, s string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	write(t, tmp, s)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// change is a change to files that the watch must report.
type change struct {
	name string
	do   func()
}

// callsBackOn runs a watch with cfg and checks that each change, made in
// turn, is followed by a callback.
func callsBackOn(t *testing.T, cfg Config, changes ...change) {
	t.Helper()
	ready := watched(t, &cfg)
	calls := run(t, cfg)
	ready()
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) { waitCall(t, calls, c.name, c.do) })
	}
}

func TestRunCallsBackOnEveryKindOfChange(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	write(t, file, "one")
	callsBackOn(t, Config{Files: []string{file}},
		change{"write in place", func() { write(t, file, "three") }},
		change{"atomic replace", func() { replace(t, file, "four") }},
		change{"remove", func() { _ = os.Remove(file) }},
		change{"create", func() { write(t, file, "five") }},
		change{"chmod", func() { _ = os.Chmod(file, 0o400) }},
	)
}

// TestRunWatchesAWholeDirectory: with Config.Dirs, any entry of the
// directory counts, including names not known in advance.
func TestRunWatchesAWholeDirectory(t *testing.T) {
	dir := t.TempDir()
	crt := filepath.Join(dir, "shop.crt")
	callsBackOn(t, Config{Dirs: []string{dir}},
		change{"create a new name", func() { write(t, crt, "one") }},
		change{"write in place", func() { write(t, crt, "two") }},
		change{"atomic replace", func() { replace(t, filepath.Join(dir, "other.key"), "three") }},
		change{"remove", func() { _ = os.Remove(crt) }},
	)
}

// TestRunFollowsASymlinkSwap: a Kubernetes Secret volume points each file
// at ..data/NAME and swaps the ..data symlink to a new directory.
func TestRunFollowsASymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "token"), content)
	}
	version("..v1", "first")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "token")
	if err := os.Symlink("..data/token", file); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Files: []string{file}, Logger: zerolog.New(zerolog.NewTestWriter(t))}
	ready := watched(t, &cfg)
	v := NewValue(cfg, parseString)
	runValue(t, v)
	ready()
	if got, err := v.Get(); got != "first" || err != nil {
		t.Fatalf("Get = %q, %v; want first", got, err)
	}
	version("..v2", "second")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..v1")); err != nil {
		t.Fatal(err)
	}
	// The watch reloads on the swap (Get alone would see it too: the stat
	// follows the symlinks).
	polltest.Until(t, waitFor, "the swapped secret", func() bool { return current(v) == "second" })
	if got, err := v.Get(); got != "second" || err != nil {
		t.Fatalf("Get = %q, %v; want second", got, err)
	}
}

// TestRunPollsAMissingDirectory: a file whose directory does not exist yet
// is polled, and watched once the directory appears.
func TestRunPollsAMissingDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	file := filepath.Join(dir, "token")
	cfg := Config{Files: []string{file}, Fallback: 10 * time.Millisecond}
	ready := watched(t, &cfg)
	calls := run(t, cfg)
	polltest.Until(t, waitFor, "callbacks while the directory is missing", func() bool { return calls.Load() >= 2 })
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ready() // the next poll watches the new directory
	waitCall(t, calls, "creating the file", func() { write(t, file, "x") })
}

func parseString(data [][]byte) (string, error) {
	s := strings.TrimSpace(string(data[0]))
	if s == "" {
		return "", errors.New("is empty")
	}
	return s, nil
}

func parseInt(data [][]byte) (int, error) { return strconv.Atoi(strings.TrimSpace(string(data[0]))) }

// TestValueKeepsTheLastGoodValue: a change that does not parse keeps the
// last good value and reports the file; the next good change is used at
// once, without waiting for a watch (none runs here).
func TestValueKeepsTheLastGoodValue(t *testing.T) {
	file := filepath.Join(t.TempDir(), "n")
	var logs strings.Builder
	v := NewValue(Config{Files: []string{file}, Logger: zerolog.New(&logs)}, parseInt)
	if _, err := v.Get(); !errors.Is(err, ErrNotLoaded) || !strings.Contains(err.Error(), file) {
		t.Fatalf("Get of a missing file: %v, want ErrNotLoaded naming %s", err, file)
	}
	write(t, file, "1\n")
	if got, err := v.Get(); got != 1 || err != nil {
		t.Fatalf("Get = %d, %v; want 1", got, err)
	}
	for _, bad := range []struct {
		name   string
		change func()
	}{
		{"malformed", func() { replace(t, file, "not a number") }},
		{"removed", func() { _ = os.Remove(file) }},
		{"unreadable", func() { write(t, file, "9"); _ = os.Chmod(file, 0o000) }},
	} {
		bad.change()
		if os.Geteuid() == 0 && bad.name == "unreadable" {
			continue // root reads it anyway
		}
		got, err := v.Get()
		if got != 1 || err != nil {
			t.Fatalf("%s: Get = %d, %v; want the last good 1", bad.name, got, err)
		}
		if err := v.Err(); err == nil || !strings.Contains(err.Error(), file) {
			t.Fatalf("%s: Err = %v, want an error naming %s", bad.name, err, file)
		}
	}
	_ = os.Chmod(file, 0o600)
	replace(t, file, "2")
	if got, err := v.Get(); got != 2 || err != nil || v.Err() != nil {
		t.Fatalf("Get = %d, %v (Err %v); want 2", got, err, v.Err())
	}
	if !strings.Contains(logs.String(), "keeping the last good value") {
		t.Errorf("the bad change was not logged:\n%s", logs.String())
	}
}

// TestValueReloadsOnTheWatch: a rewrite that a stat may not tell apart
// (same size, same inode, within the file system's timestamp granularity)
// is picked up by the watch.
func TestValueReloadsOnTheWatch(t *testing.T) {
	file := filepath.Join(t.TempDir(), "n")
	write(t, file, "10")
	cfg := Config{Files: []string{file}, Logger: zerolog.New(zerolog.NewTestWriter(t))}
	ready := watched(t, &cfg)
	v := NewValue(cfg, parseInt)
	runValue(t, v)
	ready()
	for i := 11; i < 15; i++ {
		write(t, file, strconv.Itoa(i))
		polltest.Until(t, waitFor, "value "+strconv.Itoa(i), func() bool { return current(v) == i })
	}
}
