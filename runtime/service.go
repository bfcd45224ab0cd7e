package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// The driver's container calls go to Podman's REST service (`podman system
// service`), one process the driver starts and owns, over a unix socket in
// a private directory: a podman process costs about 75 ms of CPU to start
// and exit, more than many of the calls themselves, so one for every call
// cannot keep up with a node starting its instances.
const (
	// serviceIdle is the service's --time: it exits once no connection
	// has been open for this long. The driver keeps one open while it
	// watches events, and starts the service again when a call finds it
	// gone, so this only bounds how long a service outlives a driver that
	// was never closed (a killed agent).
	serviceIdle = 60 * time.Second
	// serviceStartTimeout bounds the start of the service, until it
	// answers on its socket.
	serviceStartTimeout = 30 * time.Second
	// serviceStopGrace is how long Close waits for the service to exit
	// after SIGTERM before it kills it.
	serviceStopGrace = 10 * time.Second
	// apiPrefix is the libpod API's path prefix; Podman 4.0 and later
	// serve it.
	apiPrefix = "/v4.0.0/libpod"
)

// ErrServiceUnavailable means Podman's REST service could not be started
// or reached; the error says why (podman's own words when it printed any).
var ErrServiceUnavailable = errors.New("runtime: podman's REST service is unavailable")

// service is the `podman system service` of one driver. It starts at the
// first call, is started again by the next call after it died, and stops
// at Close; containers are not its children (conmon runs each), so they
// keep running when it stops.
type service struct {
	binary string
	args   func() []string // podman's global arguments
	wait   time.Duration   // exec.Cmd.WaitDelay

	mu     sync.Mutex
	dir    string   // private directory holding the socket; "" before the first start
	proc   *svcProc // the running service, nil when none
	closed bool
	wg     sync.WaitGroup // the goroutines that wait for each process

	client *http.Client
}

// svcProc is one run of the service.
type svcProc struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	err    error         // its exit, once done is closed
	stderr *syncTail
}

func newService(binary string, args func() []string, waitDelay time.Duration) *service {
	s := &service{binary: binary, args: args, wait: waitDelay}
	s.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.socket())
		},
		MaxIdleConnsPerHost: 8,
		// Shorter than serviceIdle: an idle connection of the pool
		// alone does not keep a service of a forgotten driver alive.
		IdleConnTimeout: serviceIdle / 2,
	}}
	return s
}

// socket returns the socket's path.
func (s *service) socket() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filepath.Join(s.dir, "podman.sock")
}

// ensure starts the service unless it runs, and waits until it answers.
func (s *service) ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%w: the driver is closed", ErrServiceUnavailable)
	}
	if p := s.proc; p != nil {
		select {
		case <-p.done:
			s.proc = nil // it died: start another
		default:
			return nil
		}
	}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "kat-podman-")
		if err != nil {
			return fmt.Errorf("%w: make the directory of its socket: %w", ErrServiceUnavailable, err)
		}
		s.dir = dir
	}
	sock := filepath.Join(s.dir, "podman.sock")
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: remove the socket of a service before: %w", ErrServiceUnavailable, err)
	}
	args := append(s.args(), "system", "service", "--time", fmt.Sprint(int(serviceIdle/time.Second)), "unix://"+sock)
	// Not CommandContext: the service outlives the call that starts it.
	cmd := exec.Command(s.binary, args...)
	p := &svcProc{cmd: cmd, done: make(chan struct{}), stderr: &syncTail{}}
	cmd.Stderr = p.stderr
	cmd.WaitDelay = s.wait
	// Its own process group (a ^C at the agent's terminal is the agent's
	// to handle), and gone with the agent even when the agent is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%w: start podman system service: %w", ErrServiceUnavailable, err)
	}
	s.proc = p
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		p.err = cmd.Wait()
		close(p.done)
	}()
	return s.waitReady(ctx, p, sock)
}

// waitReady waits until the service answers on sock, it exits, or ctx or
// serviceStartTimeout ends. Called with s.mu held.
func (s *service) waitReady(ctx context.Context, p *svcProc, sock string) error {
	ctx, cancel := context.WithTimeout(ctx, serviceStartTimeout)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-p.done:
			t.Stop()
			s.proc = nil
			return fmt.Errorf("%w: podman system service exited at start (%w): %s", ErrServiceUnavailable, p.err, p.stderr)
		case <-ctx.Done():
			t.Stop()
			s.stopLocked(p)
			return fmt.Errorf("%w: podman system service did not listen on %s: %w", ErrServiceUnavailable, sock, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// stopLocked stops a service process: SIGTERM, then SIGKILL after
// serviceStopGrace. Called with s.mu held.
func (s *service) stopLocked(p *svcProc) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(serviceStopGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if s.proc == p {
		s.proc = nil
	}
}

// close stops the service, if it runs, and refuses further calls. The
// containers it started keep running.
func (s *service) close() error {
	s.mu.Lock()
	s.closed = true
	if p := s.proc; p != nil {
		s.stopLocked(p)
	}
	dir := s.dir
	s.mu.Unlock()
	s.wg.Wait()
	s.client.CloseIdleConnections()
	if dir != "" {
		return os.RemoveAll(dir)
	}
	return nil
}

// lost reports whether err is a failure to reach the service at all (it
// died, or is starting again): nothing was sent, so the call may be made
// again once it runs.
func lost(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// syncTail keeps the last maxStderr bytes written to it (a process's
// stderr); it is safe for a writer and readers at once.
type syncTail struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (t *syncTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return (&tailWriter{buf: &t.buf, max: maxStderr}).Write(p)
}

// String returns what it keeps, trimmed.
func (t *syncTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return trimStderr(t.buf.Bytes())
}
