package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// PodmanConfig configures a Podman driver. The zero value uses podman from
// PATH with its default storage.
//
// Several agents can share one machine when each has its own Root, RunRoot,
// NetworkConfigDir and TmpDir (podman keeps its event log under TmpDir).
type PodmanConfig struct {
	// Binary is the podman executable. Default "podman" (looked up in
	// PATH).
	Binary string
	// Root is podman's storage root (--root). Default "": podman's.
	Root string
	// RunRoot is podman's run root (--runroot). Default "": podman's.
	RunRoot string
	// NetworkConfigDir is where podman keeps network definitions
	// (--network-config-dir). Default "": podman's.
	NetworkConfigDir string
	// TmpDir is podman's directory for temporary state, including the
	// event log (--tmpdir). Default "": podman's.
	TmpDir string
	// DefaultUserNS is the --userns of a ContainerSpec that names none.
	// Default "auto": container root is never host root.
	DefaultUserNS string
	// AutoUserNSLock is the file every create with --userns=auto locks, so
	// that such creates run one at a time across processes (podman 4.3.1
	// deadlocks otherwise). Drivers meant to exclude each other must name
	// the same file. Default /run/kat/podman-userns-auto.lock for root,
	// else under $XDG_RUNTIME_DIR (or the temporary directory).
	AutoUserNSLock string
	// ExtraArgs are further global arguments put before every podman
	// subcommand. Default none.
	ExtraArgs []string
	// WaitDelay bounds how long a podman command (and the REST service) may
	// keep its output open after it was killed (see exec.Cmd.WaitDelay).
	// Default 5s.
	WaitDelay time.Duration
	// OnNotice, when set, is told of the work a call does beside its own
	// when that work found something to do or failed; the call succeeds
	// either way. Default: nobody is told.
	OnNotice func(Notice)
}

// Notice is work a call did beside its own (PodmanConfig.OnNotice).
type Notice struct {
	// Container is the container's ID.
	Container string
	// What is the work: NoticeStrandedReset or NoticeFlowsForgotten.
	What string
	// Count is how many things it did.
	Count int
	// Err is what failed, if anything.
	Err error
}

// Notice.What's values.
const (
	// NoticeStrandedReset: a start reset the connections stranded in the
	// container's port reservations (resetStrandedAfterStart).
	NoticeStrandedReset = "reset connections stranded in the port reservations"
	// NoticeFlowsForgotten: a removal deleted the tracked flows answered
	// from the container's addresses (forgetFlows).
	NoticeFlowsForgotten = "forgot the tracked flows of the removed container's addresses"
)

// notice tells OnNotice of n when it did something or failed.
func (p *Podman) notice(n Notice) {
	if p.cfg.OnNotice != nil && (n.Count > 0 || n.Err != nil) {
		p.cfg.OnNotice(n)
	}
}

// Podman is a ContainerRuntime that sends its calls to Podman's REST
// service (`podman system service`), which it starts at the first call, on
// a unix socket of its own, with the configuration's global arguments
// (storage, run root, network config dir, tmpdir), and starts again when a
// call finds it gone. Close stops the service; the containers keep running.
// It is safe for concurrent use.
//
// Bound every call with a context deadline: podman can hang (podman 4.3.1
// sometimes does, holding its storage locks).
type Podman struct {
	cfg PodmanConfig
	svc *service
	// autoCreate lets one create with --userns=auto run at a time on the
	// host: podman 4.3.1 can hang for good, holding every storage lock,
	// when several allocate auto user namespaces at once.
	autoCreate *autoUserNSLock
}

var _ ContainerRuntime = (*Podman)(nil)

// NewPodman returns a driver with cfg's defaults filled in.
func NewPodman(cfg PodmanConfig) *Podman {
	if cfg.Binary == "" {
		cfg.Binary = "podman"
	}
	if cfg.DefaultUserNS == "" {
		cfg.DefaultUserNS = "auto"
	}
	if cfg.WaitDelay == 0 {
		cfg.WaitDelay = 5 * time.Second
	}
	if cfg.AutoUserNSLock == "" {
		cfg.AutoUserNSLock = defaultAutoUserNSLockPath()
	}
	p := &Podman{cfg: cfg, autoCreate: newAutoUserNSLock(cfg.AutoUserNSLock)}
	p.svc = newService(cfg.Binary, p.GlobalArgs, cfg.WaitDelay)
	return p
}

// Close stops the driver's REST service, if it runs, and waits for it to
// exit; calls after Close fail. The containers keep running: conmon, not
// the service, is their parent. It is safe to call twice.
func (p *Podman) Close() error {
	if err := p.svc.close(); err != nil {
		return fmt.Errorf("stop podman's REST service: %w", err)
	}
	return nil
}

// Config returns the configuration with defaults filled in.
func (p *Podman) Config() PodmanConfig { return p.cfg }

// GlobalArgs returns the global arguments put before every subcommand, for
// callers (build, scripts) that run podman themselves against the same
// storage.
func (p *Podman) GlobalArgs() []string {
	var args []string
	for _, f := range []struct{ flag, val string }{
		{"--root", p.cfg.Root},
		{"--runroot", p.cfg.RunRoot},
		{"--network-config-dir", p.cfg.NetworkConfigDir},
		{"--tmpdir", p.cfg.TmpDir},
	} {
		if f.val != "" {
			args = append(args, f.flag, f.val)
		}
	}
	return append(args, p.cfg.ExtraArgs...)
}

// command builds a podman command (the host check, and callers' commands
// against the same storage); args start with the subcommand.
func (p *Podman) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.cfg.Binary, append(p.GlobalArgs(), args...)...)
	// An ended context asks podman to stop (SIGTERM: it cleans up what it
	// started, as on ^C) and kills it WaitDelay later; a podman killed at
	// once can leave a container half made.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = p.cfg.WaitDelay
	// Only ctx ends podman: in a process group of its own, it does not get
	// the signals sent to its caller's (^C in a terminal, a service
	// manager stopping the whole group), which would cut a stop or a run
	// short, leaving a container "stopping" (see remove) or half made.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs podman and returns its stdout. A failure is a *CommandError.
func (p *Podman) run(ctx context.Context, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := p.command(ctx, args...)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), p.commandError(ctx, args, err, stderr.Bytes())
	}
	return stdout.Bytes(), nil
}

// CommandError is a podman command that failed. Error names the command
// (with environment values redacted) and podman's stderr; Unwrap yields the
// matching sentinel (ErrNotFound, ...) when one applies, or the context's
// error when the context ended the command.
type CommandError struct {
	// Args are the podman arguments after the global ones.
	Args []string
	// ExitCode is podman's exit status, -1 when it did not exit normally.
	ExitCode int
	// Stderr is podman's standard error, trimmed and capped.
	Stderr string
	// Err is the underlying error: a sentinel, a context error or the
	// exec error.
	Err error
}

func (e *CommandError) Error() string {
	return failure("podman "+strings.Join(redactArgs(e.Args), " "), e.Stderr, e.Err)
}

// failure renders a failed podman operation: what it was, podman's words
// (else err), and the fix when a program podman needs is missing.
func failure(what, words string, err error) string {
	switch {
	case words != "" && errors.Is(err, ErrHostPrerequisite):
		return what + ": " + words + ": " + err.Error()
	case words != "":
		return what + ": " + words
	}
	return what + ": " + err.Error()
}

func (e *CommandError) Unwrap() error { return e.Err }

const maxStderr = 4 << 10

func (p *Podman) commandError(ctx context.Context, args []string, err error, stderr []byte) error {
	ce := &CommandError{Args: args, ExitCode: -1, Stderr: trimStderr(stderr), Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ce.ExitCode = ee.ExitCode()
	}
	switch {
	case ctx.Err() != nil:
		ce.Err = ctx.Err()
	default:
		if s := classify(ce.Stderr); s != nil {
			ce.Err = s
		} else if len(args) > 0 && args[0] != "info" {
			if h := p.hostPrerequisiteHint(ce.Stderr); h != nil {
				ce.Err = h
			}
		}
	}
	return ce
}

// trimStderr keeps the useful part of podman's stderr: without blank lines,
// at most maxStderr bytes (the end, where the error is).
func trimStderr(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > maxStderr {
		s = "..." + s[len(s)-maxStderr:]
	}
	return s
}

// classify maps podman's error messages (podman 4.x) to sentinels.
func classify(stderr string) error {
	s := strings.ToLower(stderr)
	switch {
	case strings.Contains(s, "no such container"),
		strings.Contains(s, "no container with name or id"),
		strings.Contains(s, "no such object"):
		return ErrNotFound
	case strings.Contains(s, "image not known"),
		strings.Contains(s, "no such image"),
		strings.Contains(s, "manifest unknown"):
		return ErrImageNotFound
	case strings.Contains(s, "the container name") && strings.Contains(s, "already in use"):
		return ErrAlreadyExists
	case strings.Contains(s, "image is in use by a container"),
		strings.Contains(s, "image used by"):
		return ErrInUse
	case strings.Contains(s, "can only create exec sessions on running containers"),
		strings.Contains(s, "is not running"):
		return ErrNotRunning
	case strings.Contains(s, "unresolvable cdi devices"):
		return ErrDeviceUnavailable
	case strings.Contains(s, "listen") && strings.Contains(s, "address already in use"):
		return ErrHostPortInUse
	}
	return nil
}

// redactArgs hides environment values, which may hold secrets, from
// errors: "--env NAME=VALUE" becomes "--env NAME=<redacted>".
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		switch {
		case i > 0 && (args[i-1] == "--env" || args[i-1] == "-e"):
			out[i] = redactEnv(a)
		case strings.HasPrefix(a, "--env="):
			out[i] = "--env=" + redactEnv(strings.TrimPrefix(a, "--env="))
		}
	}
	return out
}

func redactEnv(kv string) string {
	name, _, ok := strings.Cut(kv, "=")
	if !ok {
		return kv
	}
	return name + "=<redacted>"
}
