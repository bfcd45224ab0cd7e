package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/runtime"
)

// ErrUnknownInstance is returned by Logs for an instance this node does not
// run.
var ErrUnknownInstance = errors.New("agent: no such instance on this node")

// ErrNoPreviousRun is returned by Logs for the previous run of an instance
// whose container has not restarted.
var ErrNoPreviousRun = errors.New("agent: the container has not restarted: it has no previous run")

// runFollowPoll is how often a followed log looks for the next run of a
// container that stopped.
const runFollowPoll = 500 * time.Millisecond

// A restart starts the instance's container again (the same container), so
// its log holds every run: the previous run's output stays there until the
// container is removed. previousRuns remembers when each instance's
// previous run began and ended, from the restart that ended it, so Logs
// can cut that run out of the log.
type previousRuns struct {
	mu   sync.Mutex
	runs map[string]runWindow
}

// runWindow is when one run of a container began and ended.
type runWindow struct{ started, finished time.Time }

// restarted records that instance id's container, whose run was c, was
// started again by a step that began at began. The run ended before that
// moment, and the next one's output comes after it: began, not c's
// FinishedAt (a listing's is in whole seconds), bounds the run.
func (p *previousRuns) restarted(id string, c runtime.ContainerStatus, began time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs == nil {
		p.runs = map[string]runWindow{}
	}
	p.runs[id] = runWindow{started: c.StartedAt, finished: began}
}

// forget drops what is known of a removed instance.
func (p *previousRuns) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.runs, id)
}

func (p *previousRuns) get(id string) (runWindow, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.runs[id]
	return w, ok
}

// Logs writes the output of an instance's container to w as opts selects.
// With opts.Follow it keeps writing, across restarts of the container,
// until ctx ends or the instance leaves this node.
func (ag *Agent) Logs(ctx context.Context, instanceID string, opts api.LogOptions, w io.Writer) error {
	c, ok := ag.table.container(instanceID)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownInstance, instanceID)
	}
	if opts.Previous {
		return ag.previousLogs(ctx, instanceID, c, opts, w)
	}
	// Always read with timestamps: a followed log starts again after the
	// last line written when the container runs again.
	lw := &stampedLines{w: w, keepStamp: opts.Timestamps}
	ro := runtime.LogOptions{Follow: opts.Follow, Tail: opts.Tail, Since: opts.Since, Timestamps: true}
	for {
		if err := ag.copyLogs(ctx, instanceID, c.ID, ro, lw); err != nil {
			return err
		}
		if !opts.Follow || ctx.Err() != nil {
			return nil
		}
		next, ok := ag.nextRun(ctx, instanceID, c)
		if !ok {
			return nil
		}
		ro.Tail = 0
		if next.ID == c.ID && !lw.last.IsZero() {
			ro.Since, lw.after = lw.last, lw.last
		}
		c = next
	}
}

// previousLogs writes the output of the run before the current one of
// instance id's container c: the run the last restart ended or, when the
// agent has restarted since, every run before the current one.
func (ag *Agent) previousLogs(ctx context.Context, id string, c runtime.ContainerStatus, opts api.LogOptions, w io.Writer) error {
	win, ok := ag.runs.get(id)
	if !ok {
		if restarts(ag.table.reports(), id) == 0 || c.StartedAt.IsZero() {
			return fmt.Errorf("%w: instance %s", ErrNoPreviousRun, id)
		}
		win = runWindow{finished: c.StartedAt.Add(-time.Nanosecond)}
	}
	since := win.started
	if opts.Since.After(since) {
		since = opts.Since
	}
	lw := &stampedLines{w: w, keepStamp: opts.Timestamps, until: win.finished, tail: opts.Tail}
	if since.IsZero() {
		lw.after = time.Time{}
	} else {
		lw.after = since.Add(-time.Nanosecond)
	}
	if err := ag.copyLogs(ctx, id, c.ID, runtime.LogOptions{Since: since, Timestamps: true}, lw); err != nil {
		return err
	}
	return lw.flushTail()
}

func restarts(reps []api.InstanceStatus, id string) int {
	for _, r := range reps {
		if r.InstanceID == id {
			return r.Restarts
		}
	}
	return 0
}

// copyLogs copies one stream of the runtime's log of container cid to w.
func (ag *Agent) copyLogs(ctx context.Context, id, cid string, ro runtime.LogOptions, w *stampedLines) error {
	rc, err := ag.cfg.Runtime.Logs(ctx, cid, ro)
	if err != nil {
		return fmt.Errorf("logs of %s: %w", id, err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("stream logs of %s: %w", id, err)
	}
	return w.flush()
}

// nextRun waits until instance id's container, last seen as c, runs again
// (restarted, or replaced by another container) and returns it; false when
// ctx ends or the instance leaves the node first.
func (ag *Agent) nextRun(ctx context.Context, id string, c runtime.ContainerStatus) (runtime.ContainerStatus, bool) {
	t := time.NewTicker(runFollowPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return c, false
		case <-t.C:
		}
		next, ok := ag.table.container(id)
		switch {
		case !ok:
			return next, false
		case next.ID != c.ID || next.StartedAt.After(c.StartedAt):
			return next, true
		case next.State == runtime.StateRunning && !next.StartedAt.IsZero() && c.State != runtime.StateRunning:
			return next, true
		}
	}
}

// stampedLines writes the lines of a log read with timestamps to w,
// keeping those after after (and up to until, when set), without their
// timestamps unless keepStamp; with tail, only the last tail lines, at
// flushTail. A line without a timestamp passes as it is.
type stampedLines struct {
	w            io.Writer
	keepStamp    bool
	after, until time.Time
	tail         int
	// last is the time of the last line written.
	last    time.Time
	partial []byte
	kept    [][]byte
}

func (s *stampedLines) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.partial = append(s.partial, p...)
			break
		}
		line := append(s.partial, p[:i+1]...)
		s.partial = nil
		p = p[i+1:]
		if err := s.line(line); err != nil {
			return n - len(p), err
		}
	}
	return n, nil
}

// flush writes a last line that has no newline.
func (s *stampedLines) flush() error {
	if len(s.partial) == 0 {
		return nil
	}
	line := s.partial
	s.partial = nil
	return s.line(line)
}

func (s *stampedLines) line(line []byte) error {
	stamp, rest, ok := bytes.Cut(line, []byte(" "))
	if ok {
		if t, err := time.Parse(time.RFC3339Nano, string(stamp)); err == nil {
			if !t.After(s.after) || !s.until.IsZero() && t.After(s.until) {
				return nil
			}
			s.last = t
			if !s.keepStamp {
				line = rest
			}
		}
	}
	if s.tail > 0 {
		s.kept = append(s.kept, bytes.Clone(line))
		if len(s.kept) > s.tail {
			s.kept = s.kept[1:]
		}
		return nil
	}
	_, err := s.w.Write(line)
	return err
}

// flushTail writes the lines kept for a tail.
func (s *stampedLines) flushTail() error {
	for _, l := range s.kept {
		if _, err := s.w.Write(l); err != nil {
			return err
		}
	}
	s.kept = nil
	return nil
}

// ContainerOf returns the ID of the container of instance id, to run a
// command in (katcall exec).
func (ag *Agent) ContainerOf(id string) (string, error) {
	c, ok := ag.table.container(id)
	if !ok || c.ID == "" {
		return "", fmt.Errorf("%w: %s", ErrUnknownInstance, id)
	}
	return c.ID, nil
}
