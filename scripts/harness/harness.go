package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// StateFile is the name of the file in Options.StateDir that records what Up
// made, for Down.
const StateFile = "harness.json"

// ErrAlreadyUp is returned by Up when the state directory already records a
// harness: run Down on it first.
var ErrAlreadyUp = errors.New("harness: already up")

// Options configure Up.
type Options struct {
	// Name names the harness: the namespaces are NAME-node1, NAME-node2, ...,
	// the links' names derive from it and the iptables rule's comment is
	// "kat-harness NAME". 1 to 32 of a-z, 0-9 and -. Required; two harnesses
	// up at the same time need different names.
	Name string
	// Hosts is the number of hosts, 1 to MaxHosts. Required.
	Hosts int
	// Subnet is the hosts' subnet: the bridge gets its first address, host i
	// the i+1-th. Default: a /24 of DefaultPool that overlaps no address or
	// route of the machine. Up refuses a subnet that overlaps one.
	Subnet netip.Prefix
	// StateDir holds the state file and one directory per host
	// (StateDir/node1, ...). Required; created when missing (and then removed
	// by Down).
	StateDir string

	// failBefore and crashBefore name a step of Up (see upSteps) before which
	// Up fails, as after an error (undoing what it did), or stops as if its
	// process died (leaving everything for Down). For tests.
	failBefore, crashBefore string
}

// Cluster is a harness that is up: what Up made, as the state file records it.
type Cluster struct {
	// Name is Options.Name.
	Name string `json:"name"`
	// StateDir is the absolute path of Options.StateDir.
	StateDir string `json:"stateDir"`
	// Bridge is the name of the bridge on the machine: "kh-" and 8 hex digits.
	Bridge string `json:"bridge"`
	// Subnet is the hosts' subnet.
	Subnet netip.Prefix `json:"subnet"`
	// Gateway is the bridge's address, the machine's address on the subnet.
	Gateway netip.Addr `json:"gateway"`
	// Hosts are the hosts, node1 first.
	Hosts []Host `json:"hosts"`
	// Rules are the iptables rules Up inserted.
	Rules []Rule `json:"rules"`
	// CreatedStateDir records that Up created StateDir, so Down removes it.
	CreatedStateDir bool `json:"createdStateDir"`
}

// Host is one host of a Cluster.
type Host struct {
	// Name is "node1", "node2", ...
	Name string `json:"name"`
	// Netns is the name of its network namespace, /run/netns/Netns.
	Netns string `json:"netns"`
	// Iface is its interface on the bridge, inside Netns: "eth0".
	Iface string `json:"iface"`
	// Addr is Iface's address.
	Addr netip.Addr `json:"addr"`
	// Prefix is Addr with the subnet's length.
	Prefix netip.Prefix `json:"prefix"`
	// VethHost is the machine's end of its veth pair, a port of the bridge.
	VethHost string `json:"vethHost"`
	// WGIface is the name of its kat-agent's WireGuard interface
	// (--wg-interface): "kw-" + the harness's link ID + "-" + the host's
	// number, unique on the machine, as the userspace device's socket
	// /var/run/wireguard/WGIface.sock is shared by every namespace.
	WGIface string `json:"wgIface,omitempty"`
	// Dir holds the host's directories below: StateDir/Name.
	Dir string `json:"dir"`
	// DataDir is for kat-agent's --data-dir.
	DataDir string `json:"dataDir"`
	// PodmanRoot, RunRoot, NetworkConfigDir and TmpDir are for podman's
	// --root, --runroot, --network-config-dir and --tmpdir (PodmanArgs).
	PodmanRoot       string `json:"podmanRoot"`
	RunRoot          string `json:"runRoot"`
	NetworkConfigDir string `json:"networkConfigDir"`
	TmpDir           string `json:"tmpDir"`
}

// Rule is one iptables rule: iptables -t Table -I Chain 1 Spec... adds it.
type Rule struct {
	Table string   `json:"table"`
	Chain string   `json:"chain"`
	Spec  []string `json:"spec"`
}

// NetnsPath is the host's network namespace file, /run/netns/Netns.
func (h Host) NetnsPath() string { return filepath.Join(netnsDir, h.Netns) }

// Command returns a command that runs the program name inside the host's
// network namespace (nsenter --net=NetnsPath; the mount namespace stays the
// machine's), with TMPDIR set to TmpDir. It is exec.CommandContext's, so
// ctx's end kills it.
func (h Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + h.NetnsPath(), "--", name}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+h.TmpDir)
	// Wait returns at most WaitDelay after the process ended (or ctx did)
	// even when a child it left holds its output pipes.
	cmd.WaitDelay = WaitDelay
	return cmd
}

// run runs name inside h with ExecTimeout.
func (h Host) run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, ExecTimeout)
	defer cancel()
	return runCmd(h.Command(ctx, name, args...))
}

// PodmanArgs are podman's global flags that keep the host's containers,
// images, networks and state apart from every other host's.
func (h Host) PodmanArgs() []string {
	return []string{"--root", h.PodmanRoot, "--runroot", h.RunRoot, "--network-config-dir", h.NetworkConfigDir, "--tmpdir", h.TmpDir}
}

// netnsDir is where `ip netns add` puts namespaces.
const netnsDir = "/run/netns"

// Up makes the harness opts describe: it records its plan in
// StateDir/harness.json, then creates the host directories, the iptables
// rule, the bridge and, per host, a namespace with a veth pair into the
// bridge. When a step fails it undoes what it did (as Down) and returns the
// step's error. Up needs root, ip, nsenter and iptables.
func Up(ctx context.Context, opts Options) (*Cluster, error) {
	if err := checkTools(); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, LockTimeout)
	defer cancel()
	unlock, err := lockMachine(lctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	c, err := prepare(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, s := range c.upSteps() {
		switch s.name {
		case opts.crashBefore:
			return nil, fmt.Errorf("harness %s: simulated crash before %s", c.Name, s.name)
		case opts.failBefore:
			err = fmt.Errorf("harness %s: simulated failure before %s", c.Name, s.name)
		default:
			err = s.do(ctx)
		}
		if err != nil {
			// Undo even when ctx has ended: a half-made harness must not stay.
			return nil, errors.Join(err, c.down(context.WithoutCancel(ctx)))
		}
	}
	return c, nil
}

// prepare plans the harness, checks that none of its names is taken and
// writes the state file.
func prepare(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.StateDir == "" {
		return nil, fmt.Errorf("harness %s: no state directory", opts.Name)
	}
	statePath := filepath.Join(opts.StateDir, StateFile)
	if _, err := os.Stat(statePath); err == nil {
		return nil, fmt.Errorf("%w: %s records a harness; run Down on %s first", ErrAlreadyUp, statePath, opts.StateDir)
	}
	used, err := machinePrefixes(ctx)
	if err != nil {
		return nil, err
	}
	subnet := opts.Subnet
	switch {
	case !subnet.IsValid():
		if subnet, err = chooseSubnet(DefaultPool, opts.Name, used); err != nil {
			return nil, err
		}
	case overlapsAny(subnet.Masked(), used):
		return nil, fmt.Errorf("harness %s: subnet %v overlaps an address or route of this machine (ip -4 addr, ip -4 route show table all)", opts.Name, subnet)
	}
	c, err := plan(opts.Name, opts.Hosts, subnet, opts.StateDir)
	if err != nil {
		return nil, err
	}
	if err := c.checkNamesFree(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(c.StateDir); errors.Is(err, fs.ErrNotExist) {
		c.CreatedStateDir = true
	}
	if err := os.MkdirAll(c.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("harness %s: %w", c.Name, err)
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) checkNamesFree() error {
	names := []string{c.Bridge}
	for _, h := range c.Hosts {
		names = append(names, h.VethHost)
		if _, err := os.Lstat(h.NetnsPath()); err == nil {
			return fmt.Errorf("harness %s: network namespace %s already exists (another harness named %s is up?)", c.Name, h.NetnsPath(), c.Name)
		}
	}
	for _, n := range names {
		if linkExists(n) {
			return fmt.Errorf("harness %s: link %s already exists (another harness named %s is up?)", c.Name, n, c.Name)
		}
	}
	return nil
}

type step struct {
	name string
	do   func(context.Context) error
}

// upSteps are Up's steps after the state file is written, in order; Down
// undoes any prefix of them.
func (c *Cluster) upSteps() []step {
	steps := []step{
		{"dirs", func(context.Context) error { return c.makeDirs() }},
		{"iptables", c.addRules},
		{"bridge", c.addBridge},
	}
	for _, h := range c.Hosts {
		steps = append(steps, step{"host " + h.Name, func(ctx context.Context) error { return c.addHost(ctx, h) }})
	}
	return steps
}

func (c *Cluster) makeDirs() error {
	for _, h := range c.Hosts {
		for _, d := range []string{h.DataDir, h.PodmanRoot, h.RunRoot, h.NetworkConfigDir, h.TmpDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return fmt.Errorf("harness %s: %w", c.Name, err)
			}
		}
	}
	return nil
}

func (c *Cluster) addRules(ctx context.Context) error {
	for _, r := range c.Rules {
		args := append([]string{"-w", "-t", r.Table, "-I", r.Chain, "1"}, r.Spec...)
		if err := run(ctx, "iptables", args...); err != nil {
			return fmt.Errorf("harness %s: %w", c.Name, err)
		}
	}
	return nil
}

func (c *Cluster) addBridge(ctx context.Context) error {
	gw := netip.PrefixFrom(c.Gateway, c.Subnet.Bits()).String()
	for _, args := range [][]string{
		{"link", "add", c.Bridge, "type", "bridge"},
		{"addr", "add", gw, "dev", c.Bridge},
		{"link", "set", c.Bridge, "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("harness %s: %w", c.Name, err)
		}
	}
	return nil
}

func (c *Cluster) addHost(ctx context.Context, h Host) error {
	for _, args := range [][]string{
		{"netns", "add", h.Netns},
		{"link", "add", h.VethHost, "type", "veth", "peer", "name", h.Iface, "netns", h.Netns},
		{"link", "set", h.VethHost, "master", c.Bridge},
		{"link", "set", h.VethHost, "up"},
	} {
		if err := run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", h.Prefix.String(), "dev", h.Iface},
		{"link", "set", h.Iface, "up"},
		{"link", "set", "lo", "up"},
	} {
		if err := h.run(ctx, "ip", args...); err != nil {
			return fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
		}
	}
	return nil
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("harness %s: %w", c.Name, err)
	}
	path := filepath.Join(c.StateDir, StateFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("harness %s: write state: %w", c.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("harness %s: write state: %w", c.Name, err)
	}
	return nil
}

// Load reads the state file of the harness in stateDir; the error wraps
// fs.ErrNotExist when no harness is up there.
func Load(stateDir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, StateFile))
	if err != nil {
		return nil, fmt.Errorf("harness: read state: %w", err)
	}
	var c Cluster
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("harness: read state %s: %w", filepath.Join(stateDir, StateFile), err)
	}
	return &c, nil
}

// linkExists reports whether the machine's network namespace (the one this
// process runs in) has a link named name.
func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// machinePrefixes returns every IPv4 address (as its prefix) and route
// destination of the machine's network namespace.
func machinePrefixes(ctx context.Context) ([]netip.Prefix, error) {
	addrOut, err := output(ctx, "ip", "-4", "-o", "addr", "show")
	if err != nil {
		return nil, err
	}
	addrs, err := parseAddrs(addrOut)
	if err != nil {
		return nil, fmt.Errorf("harness: ip -4 -o addr show: %w", err)
	}
	routeOut, err := output(ctx, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	routes, err := parseRoutes(routeOut)
	if err != nil {
		return nil, fmt.Errorf("harness: ip -4 route show table all: %w", err)
	}
	return append(addrs, routes...), nil
}

func checkTools() error {
	for _, tool := range []string{"ip", "nsenter", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("harness: %s is not installed: %w", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("harness: needs root (euid %s)", strconv.Itoa(os.Geteuid()))
	}
	return nil
}

// ExecTimeout bounds each program the harness runs (ip, iptables -w, which
// waits for the xtables lock that Podman's netavark takes too, nsenter ...):
// no step of Up or Down can block for longer.
const ExecTimeout = time.Minute

// WaitDelay is the exec.Cmd.WaitDelay of the harness's commands and of
// Host.Command's.
const WaitDelay = 5 * time.Second

// LockTimeout bounds Up's wait for another harness's Up on this machine.
const LockTimeout = 2 * time.Minute

func run(ctx context.Context, name string, args ...string) error {
	_, err := output(ctx, name, args...)
	return err
}

func runCmd(cmd *exec.Cmd) error {
	_, err := outputCmd(cmd)
	return err
}

// output runs name with ExecTimeout and returns its standard output.
func output(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ExecTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = WaitDelay
	return outputCmd(cmd)
}

// outputCmd runs cmd, whose context bounds it, and returns its standard
// output, also when it fails (the error then carries its standard error).
func outputCmd(cmd *exec.Cmd) (string, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
