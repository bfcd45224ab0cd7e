package runtime

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// Events implements ContainerRuntime with `podman events --format json`.
// Podman keeps one event log per TmpDir, so agents sharing a machine see
// each other's events unless their TmpDirs differ; the label filter (for
// example LabelNode) keeps them apart either way.
func (p *Podman) Events(ctx context.Context, labels map[string]string, out chan<- Event) error {
	args := []string{"events", "--format", "json", "--filter", "type=container",
		"--filter", "label=" + LabelManaged + "=true"}
	cmd := p.command(ctx, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("watch container events: %w", err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("watch container events: %w", p.commandError(ctx, args, err, nil))
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sendErr error
	for sc.Scan() {
		ev, err := parseEvent(sc.Bytes())
		if err != nil {
			sendErr = err
			break
		}
		if !matchLabels(ev.Labels, labels) {
			continue
		}
		select {
		case out <- ev:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	if sendErr == nil {
		sendErr = sc.Err()
	}
	if sendErr != nil {
		// Stop podman before Wait, or it could block writing to the
		// pipe; its exit status no longer matters.
		_ = cmd.Process.Kill()
	}
	waitErr := cmd.Wait()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case sendErr != nil:
		return fmt.Errorf("watch container events: %w", sendErr)
	case waitErr != nil:
		return fmt.Errorf("watch container events: %w", p.commandError(ctx, args, waitErr, stderr.Bytes()))
	}
	return fmt.Errorf("watch container events: podman events ended unexpectedly: %s", trimStderr(stderr.Bytes()))
}

// eventEntry is one line of `podman events --format json` (podman 4.3).
type eventEntry struct {
	ID         string            `json:"ID"`
	Name       string            `json:"Name"`
	Image      string            `json:"Image"`
	Status     string            `json:"Status"`
	Type       string            `json:"Type"`
	Time       json.RawMessage   `json:"Time"`
	ExitCode   *int              `json:"ContainerExitCode"`
	Attributes map[string]string `json:"Attributes"`
}

func parseEvent(line []byte) (Event, error) {
	var e eventEntry
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("parse podman event %q: %w", truncate(line, 200), err)
	}
	ev := Event{ID: e.ID, Name: e.Name, Image: e.Image, Action: e.Status, Labels: e.Attributes, Time: eventTime(e.Time)}
	if ev.Labels == nil {
		ev.Labels = map[string]string{}
	}
	if e.ExitCode != nil {
		ev.ExitCode = *e.ExitCode
	}
	return ev, nil
}

// eventTime reads an event's Time: RFC 3339 (podman 4) or unix seconds
// (podman 3).
func eventTime(raw json.RawMessage) time.Time {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t.UTC()
		}
	}
	var n int64
	if json.Unmarshal(raw, &n) == nil && n > 0 {
		return time.Unix(n, 0).UTC()
	}
	return time.Time{}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// Logs implements ContainerRuntime with `podman logs`.
func (p *Podman) Logs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	// podman logs writes the container's stderr to its own stderr, where
	// its errors go too: check first that the container exists.
	if _, err := p.run(ctx, "container", "inspect", "--format", "{{.Id}}", "--", id); err != nil {
		return nil, fmt.Errorf("read logs of %s: %w", id, err)
	}
	args := []string{"logs"}
	if opts.Follow {
		args = append(args, "--follow")
	}
	if opts.Tail > 0 {
		args = append(args, "--tail", strconv.Itoa(opts.Tail))
	}
	if !opts.Since.IsZero() {
		args = append(args, "--since", opts.Since.UTC().Format(time.RFC3339Nano))
	}
	if opts.Timestamps {
		args = append(args, "--timestamps")
	}
	args = append(args, "--", id)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("read logs of %s: %w", id, err)
	}
	cmd := p.command(ctx, args...)
	cmd.Stdout = w
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("read logs of %s: %w", id, p.commandError(ctx, args, err, nil))
	}
	_ = w.Close() // the child holds its own copy; EOF comes when it exits
	return &logReader{r: r, cmd: cmd}, nil
}

// logReader is the output of a running `podman logs`. Close kills podman
// if it still runs and reaps it.
type logReader struct {
	r    *os.File
	cmd  *exec.Cmd
	once sync.Once
}

func (l *logReader) Read(b []byte) (int, error) { return l.r.Read(b) }

func (l *logReader) Close() error {
	l.once.Do(func() {
		_ = l.cmd.Process.Kill() // ends a following podman logs; harmless once it exited
		_ = l.r.Close()
		_ = l.cmd.Wait() // killed on purpose: its status says nothing
	})
	return nil
}

// Exec implements ContainerRuntime with `podman exec`. Killing the podman
// client does not end the command inside the container, so every command
// carries a unique KAT_EXEC_TOKEN variable, and on timeout the processes of
// the container that hold it are killed (this needs the right to signal
// them: root, or the user that runs rootless podman).
func (p *Podman) Exec(ctx context.Context, id string, cmdline []string, timeout time.Duration) (ExecResult, error) {
	if err := checkID(id); err != nil {
		return ExecResult{}, err
	}
	if len(cmdline) == 0 {
		return ExecResult{}, fmt.Errorf("%w: exec command: is required", ErrInvalidSpec)
	}
	token := randomToken()
	args := append([]string{"exec", "--env", execTokenVar + "=" + token, "--", id}, cmdline...)
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	var out cappedBuffer
	var stderr bytes.Buffer // the tail of both streams: podman's own error is last
	cmd := p.command(runCtx, args...)
	// One writer, so one pipe for both streams (os/exec shares it when
	// Stdout == Stderr): the output keeps the order the command wrote it
	// in, as a terminal shows it.
	w := io.MultiWriter(&out, &tailWriter{buf: &stderr, max: maxStderr})
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	res := ExecResult{Output: out.Bytes(), Truncated: out.truncated}
	if runCtx.Err() != nil {
		// Timed out or cancelled: end the command inside the container.
		killCtx, killCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer killCancel()
		killErr := p.killExec(killCtx, id, token)
		if ctx.Err() == nil {
			err = fmt.Errorf("exec %q in %s: %w after %s", cmdline, id, ErrExecTimeout, timeout)
		} else {
			err = fmt.Errorf("exec %q in %s: %w", cmdline, id, ctx.Err())
		}
		if killErr != nil {
			err = fmt.Errorf("%w (and killing it failed: %w)", err, killErr)
		}
		return res, err
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return res, fmt.Errorf("exec %q in %s: %w", cmdline, id, p.commandError(ctx, args, err, stderr.Bytes()))
	}
	if ee != nil {
		res.ExitCode = ee.ExitCode()
		// 125 and 255 with podman's "Error: ..." last are podman failing
		// (no such container, not running); 126 and 127 (not executable,
		// not found) are the command's result, as a health check sees it.
		if (res.ExitCode == 125 || res.ExitCode == 255) && podmanFailed(stderr.Bytes()) {
			return res, fmt.Errorf("exec %q in %s: %w", cmdline, id, p.commandError(ctx, args, err, stderr.Bytes()))
		}
	}
	return res, nil
}

// execTokenVar is the variable that marks the processes of one Exec.
const execTokenVar = "KAT_EXEC_TOKEN"

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// podmanFailed reports whether podman's stderr ends with its own error line.
func podmanFailed(stderr []byte) bool {
	s := bytes.TrimSpace(stderr)
	if i := bytes.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return bytes.HasPrefix(s, []byte("Error: "))
}

// cappedBuffer keeps the first MaxExecOutput bytes written to it; it is
// safe for the concurrent writes of a command's stdout and stderr.
type cappedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
}

func (c *cappedBuffer) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := MaxExecOutput - c.buf.Len()
	if len(b) > room {
		c.truncated = true
		c.buf.Write(b[:max(room, 0)])
	} else {
		c.buf.Write(b)
	}
	return len(b), nil
}

func (c *cappedBuffer) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	buf *bytes.Buffer
	max int
}

func (t *tailWriter) Write(b []byte) (int, error) {
	t.buf.Write(b)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(b), nil
}
