package netstack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/device"
)

// deviceProcessName is os.Args[0] of the process that runs a userspace
// device for its parent (DeviceMain).
const deviceProcessName = "kat-wireguard"

// Lines of the device process's protocol: it prints readyLine once its
// device exists; the parent then sends upLine and gets upLine back (or an
// error line) once the device is up. Closing its standard input ends it.
const (
	readyLine = "ready"
	upLine    = "up"
)

// deviceProcessStart bounds how long Open waits for a device process to
// report ready or up.
const deviceProcessStart = 30 * time.Second

// deviceNice is the scheduling priority (nice value) of a device process:
// every thread of it and, where the kernel groups processes by session for
// scheduling (autogroup), its session of its own. The kernel's WireGuard
// runs its crypto in softirq and kernel workers, ahead of every process; a
// userspace device at the default priority shares the CPU evenly with the
// node's builds, containers and its own agent, and its packets wait
// behind them on a busy node. The device uses the CPU only while packets
// flow.
const deviceNice = -10

// ownProcess is set by DeviceMain: the program runs userspace devices in
// a process of their own (see DeviceMain).
var ownProcess atomic.Bool

// DeviceMain makes this program the runner of its userspace WireGuard
// devices: a program calls it first thing in main. When the program was
// started as a device process (argv[0] kat-wireguard), DeviceMain runs the
// device until its standard input closes or a signal comes, and exits;
// otherwise it returns, and Open starts the program's own executable as a
// device process for each userspace device from then on.
//
// A device in a process of its own leaves the garbage collector of the
// parent (a leader's etcd, caches and loops, a heap of tens of MiB marked
// at a low GOGC) out of the packets' way: the device's own heap is a few
// MiB of buffers, collected at Go's default GOGC, as a bare wireguard-go
// process would. Programs that do not call DeviceMain (tests of other
// packages) run the device in their own process.
func DeviceMain() {
	if filepath.Base(os.Args[0]) != deviceProcessName {
		ownProcess.Store(true)
		return
	}
	if err := runDeviceProcess(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "E", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runDeviceProcess is the device process: args are the interface name, its
// MTU, and "debug" when the parent logs the device's chatter.
func runDeviceProcess(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 3 {
		return fmt.Errorf("usage: %s INTERFACE MTU debug|quiet", deviceProcessName)
	}
	mtu, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("MTU %q: %w", args[1], err)
	}
	// Its parent's signals (a terminal's Ctrl-C, a stop) are the parent's
	// to handle: the parent ends the device by closing stdin.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP)
	if err := raisePriority(deviceNice); err != nil { // slower, not broken
		fmt.Fprintln(stderr, "E", err)
	}
	if os.Getenv("GOMAXPROCS") == "" { // an operator's own setting wins
		runtime.GOMAXPROCS(deviceProcs(runtime.GOMAXPROCS(0)))
	}
	var mu sync.Mutex // one line at a time on stderr
	logf := func(level string) func(string, ...any) {
		return func(format string, a ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(stderr, level, strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", " "))
		}
	}
	logger := &device.Logger{Verbosef: device.DiscardLogf, Errorf: logf("E")}
	if args[2] == "debug" { // the parent logs debug lines
		logger.Verbosef = logf("D")
	}
	u, err := startDevice(args[0], mtu, logger)
	if err != nil {
		return err
	}
	defer u.close()
	if _, err := fmt.Fprintln(stdout, readyLine); err != nil {
		return err
	}
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		if in.Text() != upLine {
			continue
		}
		reply := upLine
		if err := u.dev.Up(); err != nil {
			reply = "error: " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		if _, err := fmt.Fprintln(stdout, reply); err != nil {
			return err
		}
	}
	return nil // stdin closed: the parent is done with the device, or gone
}

// deviceProcs is how many threads a device process runs Go code on, given
// the runtime's default (the CPUs it may use): half of them, at least one.
// A device's packets pass from goroutine to goroutine (read, encrypt or
// decrypt, send) several times each; with a thread for every CPU, most
// handoffs wake a parked thread on another CPU and idle threads spin
// looking for work, CPU the packets' senders and receivers on the same
// node need. The other half is theirs.
func deviceProcs(cpus int) int { return max(cpus/2, 1) }

// raisePriority gives this process (the leader of a process group of its
// own: startDeviceProcess makes it a session leader) the nice value nice:
// every thread it has (PRIO_PGRP reaches each thread of each process of
// the group; threads made later inherit their maker's), and its autogroup
// where the kernel has them. It sets the threads twice, for a thread
// the runtime made while the first pass ran.
func raisePriority(nice int) error {
	for range 2 {
		if err := unix.Setpriority(unix.PRIO_PGRP, 0, nice); err != nil {
			return fmt.Errorf("set the device process's priority to nice %d: %w", nice, err)
		}
	}
	err := os.WriteFile("/proc/self/autogroup", []byte(strconv.Itoa(nice)), 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("set the device process's autogroup to nice %d: %w", nice, err)
	}
	return nil
}

// deviceProcess is a userspace device run by a device process.
type deviceProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the process's stdout, line by line
	// logged ends when the process's stderr is read to its end.
	logged chan struct{}
	// exited closes once the process was waited for.
	exited chan struct{}
}

// startDeviceProcess starts this program as the device process of
// interface name and waits until it reports the device made.
func startDeviceProcess(name string, mtu int, log zerolog.Logger) (*deviceProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("netstack: find this program to run the userspace device %s: %w", name, err)
	}
	verbosity := "quiet"
	if log.GetLevel() <= zerolog.DebugLevel {
		verbosity = "debug"
	}
	cmd := &exec.Cmd{Path: exe, Args: []string{deviceProcessName, name, strconv.Itoa(mtu), verbosity}}
	// The device goes with its parent, as an embedded one would. A session
	// of its own makes it the only process of its process group and of
	// its autogroup (raisePriority).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	p := &deviceProcess{cmd: cmd, lines: make(chan string, 4), logged: make(chan struct{}), exited: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("netstack: the userspace device process of %s: %w", name, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("netstack: the userspace device process of %s: %w", name, err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("netstack: the userspace device process of %s: %w", name, err)
	}
	// Pdeathsig follows the thread that forks, not the process: a thread
	// kept locked until the process ends is never ended by the runtime
	// first.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			<-p.exited
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("netstack: start the userspace device process of %s: %w", name, err)
	}
	var lastErr atomic.Value // the last error line, for a failed start
	go func() {
		defer close(p.logged)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			level, msg, _ := strings.Cut(s.Text(), " ")
			if level == "D" {
				log.Debug().Msg(msg)
				continue
			}
			lastErr.Store(msg)
			log.Warn().Msg(msg)
		}
	}()
	go func() {
		defer close(p.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
	}()
	if err := p.expect(readyLine); err != nil {
		p.close()
		if msg, ok := lastErr.Load().(string); ok {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return nil, fmt.Errorf("netstack: start the userspace device %s: %w", name, err)
	}
	return p, nil
}

// expect waits for the next line of the process and wants it to be want.
func (p *deviceProcess) expect(want string) error {
	select {
	case line, ok := <-p.lines:
		switch {
		case !ok:
			return errors.New("its process ended")
		case line != want:
			return fmt.Errorf("its process says %q", line)
		}
		return nil
	case <-time.After(deviceProcessStart):
		return fmt.Errorf("its process did not answer within %s", deviceProcessStart)
	}
}

// up brings the device up.
func (p *deviceProcess) up() error {
	if _, err := fmt.Fprintln(p.stdin, upLine); err != nil {
		return fmt.Errorf("tell its process: %w", err)
	}
	return p.expect(upLine)
}

// close ends the process (its device, interface and UAPI socket go) and
// waits for it: it gets a few seconds to close the device, then is killed.
func (p *deviceProcess) close() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() {
		for range p.lines { // drain, so the reader ends
		}
		<-p.logged
		_ = p.cmd.Wait()
		close(p.exited)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
