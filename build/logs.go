package build

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// tailSize is how much of the end of a build log a record and a FailedError
// carry.
const tailSize = 4 << 10

// tail keeps the last tailSize bytes written to it. It is safe for
// concurrent use (podman's stdout and stderr are copied concurrently).
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - 2*tailSize; over > 0 {
		t.buf = slices.Delete(t.buf, 0, over)
	}
	return len(p), nil
}

// String returns the last tailSize bytes, starting at a line when one
// starts within them, and valid UTF-8.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	if len(b) > tailSize {
		b = b[len(b)-tailSize:]
		if i := strings.IndexByte(string(b), '\n'); i >= 0 && i < len(b)-1 {
			b = b[i+1:]
		}
	}
	return strings.ToValidUTF8(string(b), string(utf8.RuneError))
}

// logDir is where the logs of a workload's builds live.
func (b *Builder) logDir(namespace, workload string) string {
	return filepath.Join(b.cfg.WorkDir, "logs", namespace, workload)
}

// logPath is the log file of one build; a rebuild of the same commit
// replaces it.
func (b *Builder) logPath(namespace, workload, commit string) string {
	return filepath.Join(b.logDir(namespace, workload), api.ShortCommit(commit)+".log")
}

var commitPrefixRE = regexp.MustCompile(`^[0-9a-f]{12,40}$`)

// stampWriter starts every line with the time since the build started,
// "[  1.234s] ", so that a log shows where a build spends its time.
type stampWriter struct {
	w         io.Writer
	start     time.Time
	lineStart bool
}

func (s *stampWriter) Write(p []byte) (int, error) {
	n := len(p)
	var out []byte
	for len(p) > 0 {
		if s.lineStart {
			out = fmt.Appendf(out, "[%7.3fs] ", time.Since(s.start).Seconds())
			s.lineStart = false
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			out = append(out, p...)
			break
		}
		out = append(out, p[:i+1]...)
		p = p[i+1:]
		s.lineStart = true
	}
	if _, err := s.w.Write(out); err != nil {
		return 0, err
	}
	return n, nil
}

// lockedWriter serializes writes from podman's two output streams.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Log opens the build log of a commit (full hash or its first 12
// characters) of a workload on this node, while the build runs or after.
// The caller closes it. It fails with ErrLogNotFound when there is none.
func (b *Builder) Log(namespace, workload, commit string) (io.ReadCloser, error) {
	commit = strings.ToLower(commit)
	if !quadlet.IsDNSLabel(namespace) || !quadlet.IsDNSLabel(workload) || !commitPrefixRE.MatchString(commit) {
		return nil, fmt.Errorf("%w: build log of %s/%s at %q: namespace, workload or commit is malformed", ErrInvalid, namespace, workload, commit)
	}
	f, err := os.Open(b.logPath(namespace, workload, commit))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s/%s at %s on node %s", ErrLogNotFound, namespace, workload, api.ShortCommit(commit), b.cfg.Node)
	}
	if err != nil {
		return nil, fmt.Errorf("open build log: %w", err)
	}
	return f, nil
}

// pruneLogs keeps the newest KeepLogs logs of a workload, never the one of
// keep (the build that just ran).
func (b *Builder) pruneLogs(namespace, workload, keep string) error {
	dir := b.logDir(namespace, workload)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("prune build logs: %w", err)
	}
	type logFile struct {
		path string
		mod  int64
	}
	var logs []logFile
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		logs = append(logs, logFile{filepath.Join(dir, e.Name()), info.ModTime().UnixNano()})
	}
	slices.SortFunc(logs, func(a, b logFile) int { return cmp.Compare(b.mod, a.mod) })
	var errs []error
	kept := 0
	for _, l := range logs {
		if kept < b.cfg.KeepLogs || l.path == keep {
			kept++
			continue
		}
		if err := os.Remove(l.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
