package e2e

import (
	"bufio"
	"bytes"
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	katruntime "kat.dws.rip/kat/runtime"
)

// orphanGrace is the stop grace of the workloads of
// TestAgentStoppedMidRemovalLeavesNothing: long enough to catch their
// removal in the middle, short enough for the test to wait it out.
const orphanGrace = 6

// TestAgentStoppedMidRemovalLeavesNothing: a kat-agent stopped while it
// removes a deleted workload's containers (which ignore SIGTERM and take
// their grace period) leaves nothing of them: no process (conmon
// included), no published port, no address, whether it is stopped by a ^C
// to its process group (its podman rm, in a group of its own, runs on and
// the agent waits for it) or killed together with its podman rm (a crash:
// Podman then shows the containers "stopping" for good, and the restarted
// agent stops them before it removes them; Podman 4.3's rm alone would
// leave them running, unseen). A workload created afterwards gets
// addresses (the removed containers', handed out again) that its own
// containers' network namespaces alone hold.
func TestAgentStoppedMidRemovalLeavesNothing(t *testing.T) {
	requirePodman(t)
	c := startClusterFrom(t, filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"),
		func(c *Cluster) { c.OwnGroup = true })
	hex := randomHex(3)
	a, b := "orpha-"+hex, "orphb-"+hex
	mustApply(t, c, writeWorkload(t, graceWorkload(a, containerPort(t))))
	mustApply(t, c, writeWorkload(t, graceWorkload(b, containerPort(t))))
	waitReady(t, c, a, 2)
	waitReady(t, c, b, 2)

	// ^C: SIGINT to the agent's process group in the middle of the
	// removal.
	as := removeUntilStopping(t, c, a)
	if err := c.Interrupt(time.Minute); err != nil {
		t.Fatalf("kat-agent after SIGINT to its process group: %v\n%s", err, c.Tail(30))
	}
	checkGone(t, as)

	// Killed, with the podman rm it runs: the restarted agent removes what
	// Podman shows stopping.
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, b, 2)
	bs := removeUntilStopping(t, c, b)
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range podmanRemovals(t, bs) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, ci := range inspectContainers(t, ids(bs)) {
		if ci.State.Status != "stopping" || len(running(ci.State.Pid, ci.State.ConmonPid)) != 2 {
			t.Fatalf("after the agent and its podman rm were killed, container %s is %s with %v running; want it stopping with its init and conmon",
				ci.Name, ci.State.Status, running(ci.State.Pid, ci.State.ConmonPid))
		}
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	polltest.UntilErr(t, time.Minute, "the restarted agent removing "+b, func() error {
		if left := containerIDs(t, c.Node, b); len(left) > 0 {
			return fmt.Errorf("%d left", len(left))
		}
		return nil
	})
	checkGone(t, bs)
	if strings.Contains(agentLog(c, 1000), "left processes of the removed container") {
		t.Errorf("the restarted agent removed %s's containers while they ran, and killed what podman left:\n%s", b, agentLog(c, 30))
	}

	// Addresses: a new workload's are each held by its own container
	// alone.
	cw := "orphc-" + hex
	mustApply(t, c, writeWorkload(t, graceWorkload(cw, containerPort(t))))
	waitReady(t, c, cw, 2)
	cs := inspectContainers(t, containerIDs(t, c.Node, cw))
	holders := addressHolders(t)
	released := map[netip.Addr]bool{}
	for _, ci := range slices.Concat(as, bs) {
		released[ci.ip(t)] = true
	}
	for _, ci := range cs {
		ip := ci.ip(t)
		own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", ci.State.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if got := holders[ip]; !slices.Equal(got, []string{own}) {
			t.Errorf("address %s of %s is held by the network namespaces %v, want its own (%s) alone", ip, ci.Name, got, own)
		}
		t.Logf("%s has %s (released by a removed container before: %v)", ci.Name, ip, released[ip])
	}
}

// graceWorkload is webWorkload (2 replicas; busybox httpd, which as PID 1
// ignores SIGTERM) with a stop grace of orphanGrace seconds.
func graceWorkload(name string, port int) map[string]string {
	files := webWorkload(name, 2, port)
	files["workload.kat"] = strings.Replace(files["workload.kat"], "  container:\n",
		fmt.Sprintf("  container:\n    stopGracePeriodSeconds: %d\n", orphanGrace), 1)
	return files
}

func waitReady(t *testing.T, c *Cluster, name string, n int) {
	t.Helper()
	waitStatus(t, c, "default/"+name, fmt.Sprintf("ready %d/%d", n, n), func(d *api.WorkloadDetail) bool {
		return d.Status.Ready == n && len(d.Instances) == n
	})
}

// removeUntilStopping records the workload's containers, deletes it and
// waits until Podman shows every container stopping: the agent's removal
// waits out their grace.
func removeUntilStopping(t *testing.T, c *Cluster, name string) []inspected {
	t.Helper()
	cs := inspectContainers(t, containerIDs(t, c.Node, name))
	if r := c.Katcall(context.Background(), "delete", "workload", "default/"+name); r.Code != 0 {
		t.Fatalf("delete %s: %s", name, r)
	}
	polltest.UntilErr(t, 2*orphanGrace*time.Second, name+"'s containers stopping", func() error {
		for _, ci := range inspectContainers(t, ids(cs)) {
			if ci.State.Status != "stopping" {
				return fmt.Errorf("%s is %s", ci.Name, ci.State.Status)
			}
		}
		return nil
	})
	return cs
}

// checkGone fails the test unless Podman has none of the containers and
// nothing of them is left: no process (their init, their conmon, anything
// in their cgroup), no published port, no network namespace, and their
// address in none.
func checkGone(t *testing.T, cs []inspected) {
	t.Helper()
	holders := addressHolders(t)
	for _, ci := range cs {
		if exec.Command("podman", "container", "exists", ci.ID).Run() == nil {
			t.Errorf("podman still has %s", ci.Name)
		}
		procs, conmons, err := katruntime.ContainerProcesses(ci.ID)
		if left := running(ci.State.Pid, ci.State.ConmonPid); len(left) > 0 || len(procs) > 0 || len(conmons) > 0 || err != nil {
			t.Errorf("processes of the removed %s run: %v of its init %d and conmon %d; in its cgroup %v; conmons %v (%v)",
				ci.Name, left, ci.State.Pid, ci.State.ConmonPid, procs, conmons, err)
		}
		for _, p := range ci.hostPorts(t) {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
			if err != nil {
				t.Errorf("the published port %d of the removed %s is still taken: %v", p, ci.Name, err)
				continue
			}
			l.Close()
		}
		if _, err := os.Stat(ci.NetworkSettings.SandboxKey); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the network namespace %s of the removed %s is still there (%v)", ci.NetworkSettings.SandboxKey, ci.Name, err)
		}
		if h := holders[ci.ip(t)]; len(h) > 0 {
			t.Errorf("the address %s of the removed %s is still held by the network namespaces %v", ci.ip(t), ci.Name, h)
		}
	}
}

// inspected is the part of podman inspect's output the test reads.
type inspected struct {
	ID    string `json:"Id"`
	Name  string
	State struct {
		Status    string
		Pid       int
		ConmonPid int
	}
	NetworkSettings struct {
		SandboxKey string
		Networks   map[string]struct{ IPAddress string }
		Ports      map[string][]struct{ HostPort string }
	}
}

func inspectContainers(t *testing.T, ids []string) []inspected {
	t.Helper()
	var cs []inspected
	if err := json.Unmarshal([]byte(podman(t, append([]string{"inspect", "--format", "json"}, ids...)...)), &cs); err != nil {
		t.Fatal(err)
	}
	return cs
}

func ids(cs []inspected) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// ip is the container's one address.
func (c inspected) ip(t *testing.T) netip.Addr {
	t.Helper()
	for _, n := range c.NetworkSettings.Networks {
		if ip, err := netip.ParseAddr(n.IPAddress); err == nil {
			return ip
		}
	}
	t.Fatalf("%s has no address: %+v", c.Name, c.NetworkSettings)
	return netip.Addr{}
}

func (c inspected) hostPorts(t *testing.T) []int {
	t.Helper()
	var ports []int
	for _, bs := range c.NetworkSettings.Ports {
		for _, b := range bs {
			p, err := strconv.Atoi(b.HostPort)
			if err != nil {
				t.Fatalf("%s publishes port %q", c.Name, b.HostPort)
			}
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		t.Fatalf("%s publishes no port", c.Name)
	}
	return ports
}

// running returns those of pids that run (not zombies).
func running(pids ...int) []int {
	var out []int
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if i := bytes.LastIndexByte(stat, ')'); err == nil && i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// podmanRemovals returns the podman rm processes that remove any of cs.
func podmanRemovals(t *testing.T, cs []inspected) []int {
	t.Helper()
	var pids []int
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(bytes.TrimRight(b, "\x00")), "\x00")
		if err != nil || filepath.Base(args[0]) != "podman" || !slices.Contains(args, "rm") {
			continue
		}
		if slices.ContainsFunc(cs, func(c inspected) bool { return slices.Contains(args, c.ID) }) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		t.Fatalf("no podman rm of %v runs", ids(cs))
	}
	return pids
}

// addressHolders maps each IPv4 address local to a network namespace of
// this host other than the host's own to those namespaces (as
// /proc/PID/ns/net names them), read from each namespace's routing table
// (/proc/PID/net/fib_trie of one of its processes).
func addressHolders(t *testing.T) map[netip.Addr][]string {
	t.Helper()
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{host: true}
	holders := map[netip.Addr][]string{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err != nil || seen[ns] {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "net", "fib_trie"))
		if err != nil {
			continue // gone meanwhile: another process of it may tell
		}
		seen[ns] = true
		for _, ip := range localAddresses(b) {
			holders[ip] = append(holders[ip], ns)
		}
	}
	return holders
}

// localAddresses returns the addresses a fib_trie lists as local ("/32
// host LOCAL" under "|-- ADDRESS"), each once.
func localAddresses(fibTrie []byte) []netip.Addr {
	var out []netip.Addr
	var last netip.Addr
	sc := bufio.NewScanner(bytes.NewReader(fibTrie))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "|-- "); ok {
			last, _ = netip.ParseAddr(rest)
		} else if line == "/32 host LOCAL" && last.IsValid() && !slices.Contains(out, last) {
			out = append(out, last)
		}
	}
	return out
}
