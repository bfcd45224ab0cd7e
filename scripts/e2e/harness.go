package e2e

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
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"kat.dws.rip/kat/internal/freeport"
	katruntime "kat.dws.rip/kat/runtime"
)

// Binaries are the paths of the built kat-agent and katcall.
type Binaries struct {
	Agent   string
	Katcall string
}

// RepoRoot returns the module root: the nearest directory at or above the
// working directory (go test runs a package's tests in the package's
// directory) whose go.mod is this module's. Not this file's compiled-in
// path, which -trimpath (task test's builds) takes out.
var RepoRoot = sync.OnceValue(func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("e2e: find the repository: %v", err))
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && slices.Contains(strings.Split(string(b), "\n"), "module "+modulePath) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			panic(fmt.Sprintf("e2e: no go.mod of %s at or above %s", modulePath, wd))
		}
	}
})

// modulePath is the module RepoRoot looks for.
const modulePath = "kat.dws.rip/kat"

// Build compiles kat-agent and katcall into dir, with -trimpath and
// CGO_ENABLED=0 as task build and scripts/up.sh do: the packages compiled
// for one are in Go's build cache for the others, whichever directory the
// repository is in, and kat-agent is static, as it must be to set secret
// environment variables inside containers of any image.
func Build(dir string) (Binaries, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-o", dir+string(os.PathSeparator), "./cmd/kat-agent", "./cmd/katcall")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Binaries{}, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return Binaries{Agent: filepath.Join(dir, "kat-agent"), Katcall: filepath.Join(dir, "katcall")}, nil
}

// BuildTemp compiles kat-agent and katcall (Build) into a new temporary
// directory, for a test binary's TestMain: every test of the package then
// runs the same binaries, and remove deletes the directory.
func BuildTemp() (bin Binaries, remove func(), err error) {
	dir, err := os.MkdirTemp("", "kat-test-bin-")
	if err != nil {
		return Binaries{}, nil, fmt.Errorf("build kat-agent and katcall: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	if bin, err = Build(dir); err != nil {
		remove()
		return Binaries{}, nil, err
	}
	return bin, remove, nil
}

// Cluster is one kat-agent process started with init.
type Cluster struct {
	Bin     Binaries
	DataDir string
	Config  string
	Node    string
	APIPort int
	// ExtraArgs are appended to kat-agent init's arguments.
	ExtraArgs []string
	// Env, when set, is added to kat-agent's environment (e.g. "PATH=...").
	Env []string
	// OwnGroup starts kat-agent in a process group of its own, which
	// Interrupt signals as a terminal's ^C does. Default false: the test
	// binary's group, so that a ^C of go test stops the agents too.
	OwnGroup bool
	ports    []int
	// clusterCIDR is the cluster's clusterCIDR line (nextClusterCIDR).
	clusterCIDR string
	cmd         *exec.Cmd
	log         *os.File
	waitErr     chan error
	exitErr     error // how the last killed process ended
}

// NewCluster prepares (but does not start) a single-node cluster in dataDir
// with the given cluster.kat.
func NewCluster(bin Binaries, dataDir, clusterKat string) (*Cluster, error) {
	ports, err := freeport.TCP(5)
	if err != nil {
		return nil, err
	}
	return &Cluster{Bin: bin, DataDir: dataDir, Config: clusterKat, Node: "e2e-" + randomHex(3), APIPort: ports[0], ports: ports,
		clusterCIDR: nextClusterCIDR()}, nil
}

// testdataClusterCIDR is the clusterCIDR of testdata's cluster.kat files.
// Every single-node cluster of these tests runs in the machine's network
// namespace and shares podman's network config dir, where two networks may
// not overlap: Start gives each cluster a /16 of its own instead (and a
// Podman network named after its node, see NetworkName).
const testdataClusterCIDR = "clusterCIDR: 10.123.0.0/16"

// clusterCIDRs counts the /16s handed out: 10.130.0.0/16 to 10.249.0.0/16,
// which no route of these machines covers and which the examples' cluster
// (10.100.0.0/16, task up) does not meet, starting at an offset of the
// process's so that two test processes seldom meet, and passing over those
// a Podman network of the machine already uses (one another test process
// holds, or one a killed run left).
var clusterCIDRs atomic.Int64

func nextClusterCIDR() string { return pickClusterCIDR(podmanSubnets()) }

// pickClusterCIDR is nextClusterCIDR's choice given the subnets in use:
// the next /16 that meets none of them, or the next one when all do.
func pickClusterCIDR(used []netip.Prefix) string {
	var p netip.Prefix
	for range 120 {
		i := (int64(os.Getpid()) + clusterCIDRs.Add(1)) % 120
		p = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(130 + i), 0, 0}), 16)
		if !slices.ContainsFunc(used, p.Overlaps) {
			break
		}
	}
	return "clusterCIDR: " + p.String()
}

// podmanSubnets lists the subnets of the machine's Podman networks (none
// when podman is missing or fails: the cluster then reports the clash).
func podmanSubnets() []netip.Prefix {
	out, err := exec.Command("podman", "network", "ls", "--format", "json").Output()
	if err != nil {
		return nil
	}
	var nets []struct {
		Subnets []struct {
			Subnet string `json:"subnet"`
		} `json:"subnets"`
	}
	if json.Unmarshal(out, &nets) != nil {
		return nil
	}
	var subnets []netip.Prefix
	for _, n := range nets {
		for _, s := range n.Subnets {
			if p, err := netip.ParsePrefix(s.Subnet); err == nil {
				subnets = append(subnets, p)
			}
		}
	}
	return subnets
}

// NetworkName is the Podman network of the node's instances.
func NetworkName(node string) string { return "kat-" + node }

// config returns the cluster.kat kat-agent starts with: c.Config itself, or,
// when it has testdata's clusterCIDR, a copy with the cluster's own and,
// unless it sets one, a backupPath in the data directory (BackupDir), so
// that no test writes snapshots into the machine's /var/lib/kat/backups.
func (c *Cluster) config() (string, error) {
	b, err := os.ReadFile(c.Config)
	if err != nil || !bytes.Contains(b, []byte(testdataClusterCIDR)) {
		return c.Config, nil // kat-agent reports what is wrong with it
	}
	dir := filepath.Join(c.DataDir, "e2e-config")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	lines := c.clusterCIDR
	if !bytes.Contains(b, []byte("backupPath:")) {
		lines += "\n  backupPath: " + c.BackupDir()
	}
	path := filepath.Join(dir, filepath.Base(c.Config))
	return path, os.WriteFile(path, bytes.Replace(b, []byte(testdataClusterCIDR), []byte(lines), 1), 0o600)
}

// BackupDir is where the leader writes etcd snapshots when the cluster
// started from a cluster.kat of testdata (see config).
func (c *Cluster) BackupDir() string { return filepath.Join(c.DataDir, "backups") }

// KatcallConfig is the path of the katcall configuration init writes.
func (c *Cluster) KatcallConfig() string { return filepath.Join(c.DataDir, "katcall.yaml") }

// LogPath is where the agent's output goes.
func (c *Cluster) LogPath() string { return filepath.Join(c.DataDir, "agent-test.log") }

// Start runs kat-agent init and waits until katcall status succeeds.
func (c *Cluster) Start(ctx context.Context) error {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	c.log = log
	config, err := c.config()
	if err != nil {
		log.Close()
		return fmt.Errorf("write the cluster's cluster.kat: %w", err)
	}
	c.cmd = exec.Command(c.Bin.Agent, "init", "--config", config, "--data-dir", c.DataDir,
		"--node-name", c.Node, "--advertise-address", "127.0.0.1", "--log-format", "json", "--log-level", "debug",
		"--api-port", strconv.Itoa(c.ports[0]), "--agent-port", strconv.Itoa(c.ports[1]),
		"--etcd-client-port", strconv.Itoa(c.ports[2]), "--etcd-peer-port", strconv.Itoa(c.ports[3]),
		// Single-node tests run in the machine's network namespace:
		// no WireGuard device there (scripts/multinode tests it).
		"--wg-mode", "off", "--podman-network", NetworkName(c.Node))
	c.cmd.Args = append(c.cmd.Args, c.ExtraArgs...)
	if dir := os.Getenv("KAT_AGENT_CPUPROFILE_DIR"); dir != "" {
		// Profiling a test or benchmark: every kat-agent writes its CPU
		// profile there, named after its node, when it exits.
		c.cmd.Args = append(c.cmd.Args, "--cpu-profile", filepath.Join(dir, c.Node+".pprof"))
	}
	if os.Getenv("KAT_AGENT_HEAPPROFILE_DIR") != "" {
		// SaveHeapProfile fetches heap profiles from there.
		c.cmd.Args = append(c.cmd.Args, "--pprof-address", c.pprofAddress())
	}
	if len(c.Env) > 0 {
		c.cmd.Env = append(os.Environ(), c.Env...)
	}
	c.cmd.Stdout, c.cmd.Stderr = log, log
	if c.OwnGroup {
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := c.cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start kat-agent: %w", err)
	}
	c.waitErr = make(chan error, 1)
	go func(cmd *exec.Cmd, ch chan<- error) { ch <- cmd.Wait() }(c.cmd, c.waitErr)
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-c.waitErr:
			c.waitErr <- err
			return fmt.Errorf("kat-agent exited during start-up: %w\n%s", err, c.Tail(30))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if _, err := os.Stat(c.KatcallConfig()); err != nil {
			continue
		}
		if r := c.Katcall(ctx, "status"); r.Code == 0 {
			return nil
		}
	}
	return fmt.Errorf("kat-agent did not become ready within 90s\n%s", c.Tail(30))
}

// EtcdClientURL is the embedded etcd's client URL.
func (c *Cluster) EtcdClientURL() string { return "https://127.0.0.1:" + strconv.Itoa(c.ports[2]) }

func (c *Cluster) pprofAddress() string { return "127.0.0.1:" + strconv.Itoa(c.ports[4]) }

// SaveHeapProfile writes the agent's heap profile to
// $KAT_AGENT_HEAPPROFILE_DIR/{node}-{name}.pprof when that variable is set
// (the agent then serves its profiles), and does nothing otherwise. The
// text profile {name}-memstats is taken after a forced collection, so its
// HeapAlloc is the live heap.
func (c *Cluster) SaveHeapProfile(name string) error {
	if err := c.saveProfile(name+"-memstats", "heap?debug=1&gc=1"); err != nil {
		return err
	}
	return c.saveProfile(name, "heap")
}

// SaveCPUProfile profiles the agent's CPU for d, when
// $KAT_AGENT_HEAPPROFILE_DIR is set, into {node}-{name}.pprof there; it
// returns at once and the profile is written when d has passed. Without
// --cpu-profile (KAT_AGENT_CPUPROFILE_DIR), which holds the CPU profiler.
func (c *Cluster) SaveCPUProfile(name string, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.saveProfile(name, fmt.Sprintf("profile?seconds=%d", int(d.Seconds()))) }()
	return done
}

func (c *Cluster) saveProfile(name, profile string) error {
	dir := os.Getenv("KAT_AGENT_HEAPPROFILE_DIR")
	if dir == "" {
		return nil
	}
	resp, err := http.Get("http://" + c.pprofAddress() + "/debug/pprof/" + profile)
	if err != nil {
		return fmt.Errorf("profile %s: %w", profile, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", profile, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("profile %s: %w", profile, err)
	}
	return os.WriteFile(filepath.Join(dir, c.Node+"-"+name+".pprof"), b, 0o600)
}

// PID returns the agent's process ID.
func (c *Cluster) PID() int { return c.cmd.Process.Pid }

// Kill sends SIGKILL and waits for the process to end.
func (c *Cluster) Kill() error {
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	c.exitErr = <-c.waitErr
	c.log.Close()
	return nil
}

// Stop sends SIGTERM and waits up to timeout for a clean exit, returning the
// process's exit error (nil for status 0).
func (c *Cluster) Stop(timeout time.Duration) error {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	return c.waitExit(timeout, "SIGTERM")
}

// Interrupt sends SIGINT to the agent's process group (OwnGroup), as ^C in
// a terminal does, and waits up to timeout for the agent to exit, returning
// its exit error (nil for status 0).
func (c *Cluster) Interrupt(timeout time.Duration) error {
	if !c.OwnGroup {
		return errors.New("interrupt: kat-agent was not started in a process group of its own (OwnGroup)")
	}
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGINT); err != nil {
		return err
	}
	return c.waitExit(timeout, "SIGINT")
}

// waitExit waits up to timeout for the agent to exit after signal, killing
// it then.
func (c *Cluster) waitExit(timeout time.Duration, signal string) error {
	defer c.log.Close()
	select {
	case err := <-c.waitErr:
		return err
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		c.exitErr = <-c.waitErr
		return fmt.Errorf("kat-agent did not exit within %s of %s", timeout, signal)
	}
}

// Running reports whether the process has not exited.
func (c *Cluster) Running() bool {
	select {
	case err := <-c.waitErr:
		c.waitErr <- err
		return false
	default:
		return c.cmd != nil
	}
}

// Tail returns the last n lines of the agent's log.
func (c *Cluster) Tail(n int) string {
	b, _ := os.ReadFile(c.LogPath())
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	// The API's access log (a test's polls) and audit log would hide what
	// the node did.
	lines = slices.DeleteFunc(lines, func(l string) bool {
		return strings.Contains(l, `"message":"api request"`) || strings.Contains(l, `"component":"audit"`)
	})
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Result is what one katcall run produced.
type Result struct {
	Code   int
	Stdout string
	Stderr string
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

// Katcall runs katcall with this cluster's configuration.
func (c *Cluster) Katcall(ctx context.Context, args ...string) Result {
	return RunKatcall(ctx, c.Bin.Katcall, append([]string{"--config", c.KatcallConfig()}, args...)...)
}

// RunKatcall runs the katcall binary with args, for up to a minute unless
// ctx has a deadline of its own.
func RunKatcall(ctx context.Context, katcall string, args ...string) Result {
	return RunKatcallInput(ctx, katcall, nil, args...)
}

// RunKatcallInput is RunKatcall with input (nil: none) on katcall's
// standard input.
func RunKatcallInput(ctx context.Context, katcall string, input io.Reader, args ...string) Result {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, katcall, args...)
	cmd.Env = append(os.Environ(), "KATCONFIG=", "HOME="+os.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = input, &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		errb.WriteString(err.Error())
	}
	return Result{Code: code, Stdout: out.String(), Stderr: errb.String()}
}

// RSS returns the resident set size of a process in bytes.
func RSS(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// procStatusBytes reads a size field of /proc/PID/status ("VmRSS", "VmHWM")
// in bytes.
func procStatusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func itoa(i int) string { return strconv.Itoa(i) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// AgentPort is the agent API's port.
func (c *Cluster) AgentPort() int { return c.ports[1] }

// RemoveNodeContainers force-removes every container of the shared Podman
// store labelled with node: stopping kat-agent leaves its containers running
// by design, so tests clean up after themselves with this.
func RemoveNodeContainers(node string) error {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil
	}
	if err := removeByFilter(nil, "label=kat.node="+node); err != nil {
		return err
	}
	return removeNodeNetwork(node)
}

// removeNodeNetwork removes the node's Podman network (NetworkName), if
// there is one.
func removeNodeNetwork(node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := NetworkName(node)
	if exec.CommandContext(ctx, "podman", "network", "exists", name).Run() != nil {
		return nil
	}
	if out, err := exec.CommandContext(ctx, "podman", "network", "rm", name).CombinedOutput(); err != nil {
		return fmt.Errorf("podman network rm %s: %w\n%s", name, err, out)
	}
	return nil
}

// removeByFilter force-removes the containers podman ps --filter finds in
// the store of podman's global args (nil: the machine's). It stops them
// first: podman 4.3's rm --force removes a container whose stop was cut
// short (a kat-agent killed in the middle of a removal leaves it
// "stopping") without stopping it, and its processes ran on after the
// tests, unseen by podman. What is left of a removed container all the same
// is killed, and reported.
func removeByFilter(args []string, filter string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	podman := func(more ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "podman", slices.Concat(args, more)...)
	}
	out, err := podman("ps", "-aq", "--no-trunc", "--filter", filter).Output()
	if err != nil {
		return fmt.Errorf("podman ps: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil
	}
	// Errors for containers that cannot be stopped (paused, never
	// started) are the removal's to report.
	_ = podman(append([]string{"stop", "-i", "-t", "0"}, ids...)...).Run()
	// podman rm now and then fails on a busy shm mount; a retry succeeds.
	var errs []error
	for range 4 {
		out, err := podman(append([]string{"rm", "-f", "-i", "-t", "0"}, ids...)...).CombinedOutput()
		if err == nil {
			errs = nil
			break
		}
		errs = []error{fmt.Errorf("podman rm: %w\n%s", err, out)}
	}
	for _, id := range ids {
		killed, err := katruntime.KillLeftovers(ctx, id)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("podman left processes %v of the removed container %s running: kill them: %w", killed, id, err))
		case len(killed) > 0:
			errs = append(errs, fmt.Errorf("podman left processes %v of the removed container %s running: killed them", killed, id))
		}
	}
	return errors.Join(errs...)
}

// StreamLines starts cmd and sends each line it writes to its standard
// output on the returned channel, which is closed when that output ends.
// stop kills cmd if it still runs and waits for it; call it once done
// with the lines.
func StreamLines(cmd *exec.Cmd) (lines <-chan string, stop func(), err error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", cmd.Path, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", cmd.Path, err)
	}
	ch := make(chan string, 256)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ch)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-done:
				return
			}
		}
	})
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			close(done)
			_ = cmd.Process.Kill()
			wg.Wait()
			_ = cmd.Wait() // killed on purpose
		})
	}, nil
}
