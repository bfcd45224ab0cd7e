package runtime

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Events implements ContainerRuntime with the service's event stream (GET
// /events). Podman keeps one event log per TmpDir, so agents sharing a
// machine see each other's events unless their TmpDirs differ; the label
// filter (for example LabelNode) keeps them apart either way.
func (p *Podman) Events(ctx context.Context, labels map[string]string, out chan<- Event) error {
	q := url.Values{"stream": {"true"}, "filters": {filtersQuery(map[string][]string{
		"type": {"container"}, "label": labelFilters(labels)})}}
	resp, err := p.call(ctx, request{op: "podman events", method: http.MethodGet, path: "/events", query: q})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("watch container events: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		ev, err := parseEvent(sc.Bytes())
		if err != nil {
			return fmt.Errorf("watch container events: %w", err)
		}
		if !matchLabels(ev.Labels, labels) {
			continue
		}
		select {
		case out <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("watch container events: %w", err)
	}
	return errors.New("watch container events: podman's event stream ended unexpectedly")
}

// eventEntry is one event of the service's stream (podman 4.3: Docker's
// event message, whose actor attributes hold the container's labels, name,
// image and exit code).
type eventEntry struct {
	ID       string `json:"id"`
	From     string `json:"from"`
	Type     string `json:"Type"`
	Action   string `json:"Action"`
	Status   string `json:"status"`
	Time     int64  `json:"time"`
	TimeNano int64  `json:"timeNano"`
	Actor    struct {
		ID         string            `json:"ID"`
		Attributes map[string]string `json:"Attributes"`
	} `json:"Actor"`
}

// eventAttributes are the attributes podman adds to a container's labels.
var eventAttributes = []string{"image", "name", "containerExitCode", "podId"}

func parseEvent(line []byte) (Event, error) {
	var e eventEntry
	if err := json.Unmarshal(line, &e); err != nil {
		return Event{}, fmt.Errorf("parse podman event %q: %w", truncate(line, 200), err)
	}
	attrs := e.Actor.Attributes
	ev := Event{ID: cmp.Or(e.Actor.ID, e.ID), Name: attrs["name"], Image: cmp.Or(attrs["image"], e.From),
		Action: cmp.Or(e.Action, e.Status), Labels: make(map[string]string, len(attrs))}
	for k, v := range attrs {
		if !slices.Contains(eventAttributes, k) {
			ev.Labels[k] = v
		}
	}
	if c, err := strconv.Atoi(attrs["containerExitCode"]); err == nil {
		ev.ExitCode = c
	}
	switch {
	case e.TimeNano > 0:
		ev.Time = time.Unix(0, e.TimeNano).UTC()
	case e.Time > 0:
		ev.Time = time.Unix(e.Time, 0).UTC()
	}
	return ev, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// Logs implements ContainerRuntime with `podman logs`, a process, not the
// service: the service's log stream of Podman 4.3 stops following a k8s-file
// log at its rotation and its timestamps do not bound a run as the CLI's do.
// Logs are read now and then, not on any path a deploy waits on.
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

// Exec implements ContainerRuntime with `podman exec`, a process, not an
// exec session of the service: Podman 4.3 gives a session started through
// its API a conmon that lingers five minutes after the command ends (so
// that a client can still ask for the exit code), one per health check.
// Killing the podman client does not end the command inside the container,
// so every command
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
