package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kat.dws.rip/kat/internal/poll"
)

// APIPort is the port of the API of host 1's kat-agent (the leader), on its
// address; every host has its own namespace, so all of them use cluster.kat's
// default ports.
const APIPort = 9115

// AgentOptions configure StartAgents.
type AgentOptions struct {
	// Agent and Katcall are the paths of the kat-agent and katcall binaries.
	// Required.
	Agent, Katcall string
	// AgentTickSeconds and NodeLossTimeoutSeconds go into the cluster.kat
	// StartAgents writes. Default: cluster.kat's defaults (15 and 60).
	AgentTickSeconds, NodeLossTimeoutSeconds int
	// Labels are extra node labels per host name ("node2": {"zone": "b"});
	// every host also gets kat.harness/host=NAME.
	Labels map[string]map[string]string
	// BaseImageScript, when set, is scripts/build-base-image.sh: StartAgents
	// runs it for every host's Podman storage (KAT_PODMAN_ARGS) so that
	// workloads find localhost/kat-base:latest there, as nothing can be
	// pulled.
	BaseImageScript string
	// ImageScripts are more scripts like BaseImageScript (for example
	// scripts/build-ingress-image.sh), run the same way after it.
	ImageScripts []string
	// ReadyTimeout bounds the wait for every node to be Ready. Default 3 min.
	ReadyTimeout time.Duration
	// EtcdMembers, when more than 1, goes into cluster.kat as
	// spec.etcdMembers, and hosts 2 to EtcdMembers join with --etcd-peer,
	// one after the other (each Ready before the next joins). Default 0:
	// cluster.kat's default, and every other host joins as a worker.
	EtcdMembers int
	// NodeCollectAfterSeconds, when set, goes into cluster.kat as
	// spec.nodeCollectAfterSeconds. Default 0: cluster.kat's default.
	NodeCollectAfterSeconds int
	// Start is how many hosts StartAgents starts, the first ones; the
	// others can join later with StartAgent. Default 0: every host.
	Start int
	// ConfigRepo, when set, goes into cluster.kat as spec.gitops.repository
	// (branch main), with ConfigPollSeconds, when set, as its
	// pollIntervalSeconds (cluster.kat's default otherwise) and
	// WebhookSecretFile, when set, as its webhookSecretFile. Every host shares the machine's file system, so a
	// file:// repository and the secret file are the same on every member.
	ConfigRepo, WebhookSecretFile string
	ConfigPollSeconds             int
	// Args are more kat-agent flags, by host name. Default none.
	Args map[string][]string
}

// Agent is the kat-agent process of one host started by this process.
type Agent struct {
	Host Host
	cmd  *exec.Cmd
	done chan struct{}
	err  error // how cmd ended, once done is closed
}

// PID is the process ID of the agent (nsenter execs kat-agent in place).
func (a *Agent) PID() int { return a.cmd.Process.Pid }

// Done is closed when the process has ended.
func (a *Agent) Done() <-chan struct{} { return a.done }

// Signal sends sig to the process.
func (a *Agent) Signal(sig syscall.Signal) error {
	if err := a.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal kat-agent of %s: %w", a.Host.Name, err)
	}
	return nil
}

// Wait waits until the process has ended or ctx ends.
func (a *Agent) Wait(ctx context.Context) error {
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return fmt.Errorf("wait for kat-agent of %s: %w", a.Host.Name, ctx.Err())
	}
}

// ClusterKat is the path of the cluster.kat StartAgents writes, in host 1's
// directory (Down removes it).
func (c *Cluster) ClusterKat() string { return filepath.Join(c.Hosts[0].Dir, "cluster.kat") }

// KatcallConfig is the katcall configuration host 1's kat-agent init
// writes: katcall --config KatcallConfig reaches the cluster from the machine.
func (c *Cluster) KatcallConfig() string { return filepath.Join(c.Hosts[0].DataDir, "katcall.yaml") }

// AgentLog is the file h's kat-agent writes its log to.
func (h Host) AgentLog() string { return filepath.Join(h.Dir, "kat-agent.log") }

func (h Host) agentPidFile() string { return filepath.Join(h.Dir, "kat-agent.pid") }

// LeaderAPI is host 1's API address, HOST:PORT.
func (c *Cluster) LeaderAPI() string {
	return netip.AddrPortFrom(c.Hosts[0].Addr, APIPort).String()
}

// StartAgents writes the cluster's cluster.kat, starts kat-agent init in
// host 1 and, once its join token is there, kat-agent join in the others
// (opts.Start limits them), then waits until katcall lists every started
// host as a Ready node. The agents run
// in their own sessions, outliving this process (task cluster:up exits);
// StopAgents or Down ends them.
func (c *Cluster) StartAgents(ctx context.Context, opts AgentOptions) ([]*Agent, error) {
	if opts.AgentTickSeconds == 0 {
		opts.AgentTickSeconds = 15
	}
	if opts.NodeLossTimeoutSeconds == 0 {
		opts.NodeLossTimeoutSeconds = 60
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 3 * time.Minute
	}
	kat := fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: ClusterConfiguration
metadata:
  name: %s
spec:
  clusterCIDR: 10.100.0.0/16
  serviceCIDR: 10.96.0.0/16
  apiPort: %d
  volumeBasePath: %s
  backupPath: %s
  agentTickSeconds: %d
  nodeLossTimeoutSeconds: %d
`, c.Name, APIPort, filepath.Join(c.Hosts[0].Dir, "volumes"), filepath.Join(c.Hosts[0].Dir, "backups"),
		opts.AgentTickSeconds, opts.NodeLossTimeoutSeconds)
	if opts.EtcdMembers > 1 {
		kat += fmt.Sprintf("  etcdMembers: %d\n", opts.EtcdMembers)
	}
	if opts.NodeCollectAfterSeconds > 0 {
		kat += fmt.Sprintf("  nodeCollectAfterSeconds: %d\n", opts.NodeCollectAfterSeconds)
	}
	if opts.ConfigRepo != "" {
		kat += fmt.Sprintf("  gitops:\n    repository: %q\n    branch: main\n", opts.ConfigRepo)
		if opts.ConfigPollSeconds != 0 {
			kat += fmt.Sprintf("    pollIntervalSeconds: %d\n", opts.ConfigPollSeconds)
		}
		if opts.WebhookSecretFile != "" {
			kat += fmt.Sprintf("    webhookSecretFile: %q\n", opts.WebhookSecretFile)
		}
	}
	if err := os.WriteFile(c.ClusterKat(), []byte(kat), 0o600); err != nil {
		return nil, fmt.Errorf("harness %s: write cluster.kat: %w", c.Name, err)
	}
	var scripts []string
	if opts.BaseImageScript != "" {
		scripts = append(scripts, opts.BaseImageScript)
	}
	scripts = append(scripts, opts.ImageScripts...)
	if len(scripts) > 0 {
		// Every host has its own Podman storage: build them side by side.
		err := forEachHost(c.Hosts, func(h Host) error {
			for _, script := range scripts {
				cmd := h.Command(ctx, "bash", script)
				cmd.Env = append(cmd.Env, "KAT_PODMAN_ARGS="+strings.Join(h.PodmanArgs(), " "))
				if err := runCmd(cmd); err != nil {
					return fmt.Errorf("harness %s: image (%s) for %s: %w", c.Name, filepath.Base(script), h.Name, err)
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	hosts := c.Hosts
	if opts.Start > 0 && opts.Start < len(hosts) {
		hosts = hosts[:opts.Start]
	}
	var agents []*Agent
	for i := range hosts {
		a, err := c.StartAgent(ctx, i, opts)
		if err != nil {
			return agents, err
		}
		agents = append(agents, a)
		switch {
		case i == 0:
			// The join token is written before the API serves: wait for
			// the API, as katcall reaches it, before anyone joins.
			if err := waitAgents(ctx, agents, time.Minute, "the leader's API to answer katcall status", func() error {
				_, err := c.Katcall(ctx, opts.Katcall, "status")
				return err
			}); err != nil {
				return agents, fmt.Errorf("harness %s: %w", c.Name, err)
			}
		case i < opts.EtcdMembers:
			// etcd members join one at a time.
			if err := c.waitReady(ctx, agents, opts, i+1); err != nil {
				return agents, err
			}
		}
	}
	return agents, c.waitReady(ctx, agents, opts, len(hosts))
}

// waitReady waits until katcall lists want nodes, every one Ready.
func (c *Cluster) waitReady(ctx context.Context, agents []*Agent, opts AgentOptions, want int) error {
	err := waitAgents(ctx, agents, opts.ReadyTimeout, fmt.Sprintf("%d Ready nodes", want), func() error {
		nodes, err := c.Nodes(ctx, opts.Katcall)
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Status != "Ready" {
				return fmt.Errorf("nodes %v", nodes)
			}
		}
		if len(nodes) != want {
			return fmt.Errorf("nodes %v", nodes)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("harness %s: %w", c.Name, err)
	}
	return nil
}

// waitAgents polls cond until it returns nil, one of agents ends, or
// timeout passes; the error says what it waited for, cond's last error and
// the end of the log of the agent that ended.
func waitAgents(ctx context.Context, agents []*Agent, timeout time.Duration, what string, cond func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ended *Agent
	err := poll.Wait(ctx, func() (bool, error) {
		for _, a := range agents {
			select {
			case <-a.done:
				ended = a
				cancel()
				return false, fmt.Errorf("kat-agent of %s exited: %w", a.Host.Name, a.err)
			default:
			}
		}
		err := cond()
		return err == nil, err
	})
	switch {
	case err == nil:
		return nil
	case ended != nil:
		return fmt.Errorf("wait for %s: kat-agent of %s exited (%w); the end of its log:\n%s", what, ended.Host.Name, ended.err, tail(ended.Host.AgentLog(), 20))
	}
	return fmt.Errorf("wait for %s within %s: %w", what, timeout, err)
}

// StartAgent starts kat-agent in host i: init in host 1, join in the others
// (with the token the first time, without it when the host's data directory
// has joined before). It does not wait for the node.
func (c *Cluster) StartAgent(ctx context.Context, i int, opts AgentOptions) (*Agent, error) {
	h := c.Hosts[i]
	args := []string{"init", "--config", c.ClusterKat()}
	if i > 0 {
		args = []string{"join", "--leader-api", c.LeaderAPI()}
		if _, err := os.Stat(filepath.Join(h.DataDir, "node.json")); errors.Is(err, fs.ErrNotExist) {
			args = append(args, "--token-file", filepath.Join(c.Hosts[0].DataDir, "join.token"))
			if i < opts.EtcdMembers {
				args = append(args, "--etcd-peer", "--admin-token-file", filepath.Join(c.Hosts[0].DataDir, "admin.token"))
			}
		}
	}
	args = append(args, "--data-dir", h.DataDir, "--node-name", h.Name, "--advertise-address", h.Addr.String(),
		"--podman-root", h.PodmanRoot, "--podman-runroot", h.RunRoot,
		"--podman-network-config-dir", h.NetworkConfigDir, "--podman-tmpdir", h.TmpDir,
		"--volume-base-path", filepath.Join(h.Dir, "volumes"), "--log-format", "json",
		"--wg-interface", h.WGIface,
		"--node-label", "kat.harness/host="+h.Name)
	keys := make([]string, 0, len(opts.Labels[h.Name]))
	for k := range opts.Labels[h.Name] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--node-label", k+"="+opts.Labels[h.Name][k])
	}
	args = append(args, opts.Args[h.Name]...)
	log, err := os.OpenFile(h.AgentLog(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
	}
	defer log.Close() // the child has its own descriptor
	// Not h.Command's context: the agent outlives the start-up's context.
	cmd := h.Command(context.WithoutCancel(ctx), opts.Agent, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("harness %s: start kat-agent in %s: %w", c.Name, h.Name, err)
	}
	a := &Agent{Host: h, cmd: cmd, done: make(chan struct{})}
	go func() {
		a.err = cmd.Wait()
		close(a.done)
	}()
	if err := os.WriteFile(h.agentPidFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
		_ = cmd.Process.Kill()
		<-a.done
		return nil, fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
	}
	return a, nil
}

// Node is what the harness reads of katcall get nodes -o json.
type Node struct {
	Name       string            `json:"name"`
	Status     string            `json:"status"`
	Leader     bool              `json:"leader"`
	EtcdMember bool              `json:"etcdMember"`
	Labels     map[string]string `json:"labels"`
	Instances  int               `json:"instances"`
}

func (n Node) String() string { return n.Name + ":" + n.Status }

// Nodes runs katcall get nodes against the cluster.
func (c *Cluster) Nodes(ctx context.Context, katcall string) ([]Node, error) {
	out, err := c.Katcall(ctx, katcall, "get", "nodes", "-o", "json")
	if err != nil {
		return nil, err
	}
	var nodes []Node
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		return nil, fmt.Errorf("katcall get nodes -o json: %w: %s", err, out)
	}
	return nodes, nil
}

// Katcall runs katcall with the cluster's configuration from the machine
// (the hosts' addresses are on the bridge) and returns its standard output.
func (c *Cluster) Katcall(ctx context.Context, katcall string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ExecTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, katcall, append([]string{"--config", c.KatcallConfig()}, args...)...)
	cmd.Env = append(os.Environ(), "KATCONFIG=")
	cmd.WaitDelay = WaitDelay
	return outputCmd(cmd)
}

// StopAgents ends the kat-agent of every host recorded in its pid file, all
// at once: SIGTERM, then SIGKILL after StopTimeout. The agents' containers
// keep running (RemoveContainers removes them).
func (c *Cluster) StopAgents(ctx context.Context) error {
	return forEachHost(c.Hosts, func(h Host) error {
		b, err := os.ReadFile(h.agentPidFile())
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return fmt.Errorf("harness %s: %s: pid file: %w", c.Name, h.Name, err)
		}
		if err := stopPid(ctx, h, pid); err != nil {
			return fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
		}
		_ = os.Remove(h.agentPidFile())
		return nil
	})
}

// stopPid ends pid if it is still a process in h's namespace (a pid file
// may outlive its process, and the pid be reused).
func stopPid(ctx context.Context, h Host, pid int) error {
	alive := func() bool {
		pids, err := hostPids(h)
		return err == nil && slices.Contains(pids, pid)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		if !alive() {
			return nil
		}
		_ = syscall.Kill(pid, sig)
		wctx, cancel := context.WithTimeout(ctx, StopTimeout)
		err := poll.Wait(wctx, func() (bool, error) { return !alive(), nil })
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("kat-agent (pid %d) still runs after SIGKILL", pid)
}

// RemoveContainers force-removes the containers of the cluster's kat-agents
// from every host's Podman storage: those labelled with the host's node
// name and the cluster's UID (kat.node, kat.cluster). Stopping a kat-agent
// never stops its containers; their conmon processes and mounts would
// outlive the hosts. The hosts are done side by side.
func (c *Cluster) RemoveContainers(ctx context.Context) error {
	return forEachHost(c.Hosts, func(h Host) error {
		uid, err := clusterUID(h)
		if err != nil {
			return fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
		}
		if uid == "" {
			return nil // the host never ran a kat-agent
		}
		ids, err := h.Containers(ctx, "label=kat.node="+h.Name, "label=kat.cluster="+uid)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		args := append(append(h.PodmanArgs(), "rm", "--force", "--time", "0", "--ignore"), ids...)
		// Podman 4.3 sometimes fails to unmount a root filesystem that
		// is still busy just after its container was killed: try again.
		for attempt := 0; attempt < 3; attempt++ {
			if err = h.run(ctx, "podman", args...); err == nil {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			return fmt.Errorf("harness %s: %s: %w", c.Name, h.Name, err)
		}
		return nil
	})
}

// Containers lists the IDs of h's containers (all states) that match every
// podman ps filter given.
func (h Host) Containers(ctx context.Context, filters ...string) ([]string, error) {
	args := append(h.PodmanArgs(), "ps", "--all", "--quiet", "--no-trunc")
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	ctx, cancel := context.WithTimeout(ctx, ExecTimeout)
	defer cancel()
	out, err := outputCmd(h.Command(ctx, "podman", args...))
	if err != nil {
		return nil, fmt.Errorf("%s: list containers: %w", h.Name, err)
	}
	return strings.Fields(out), nil
}

// clusterUID is the cluster UID kat-agent recorded in h's data directory,
// "" when there is none.
func clusterUID(h Host) (string, error) {
	b, err := os.ReadFile(filepath.Join(h.DataDir, "node.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read node state: %w", err)
	}
	var st struct {
		ClusterUID string `json:"clusterUID"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return "", fmt.Errorf("read node state: %w", err)
	}
	return st.ClusterUID, nil
}

// AgentLogTail returns the last n lines of h's kat-agent log.
func (h Host) AgentLogTail(n int) string { return tail(h.AgentLog(), n) }

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
