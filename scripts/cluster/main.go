// Command cluster brings up and takes down a multi-node KAT harness on this
// machine: N hosts, each a network namespace on a private bridge with its own
// data directory, Podman storage root, run root and network config
// directory (package scripts/harness). Needs root, ip, nsenter and iptables.
//
//	go run ./scripts/cluster up 3    # task cluster:up -- 3
//	go run ./scripts/cluster down    # task cluster:down
//
// The harness's state lives in KAT_CLUSTER_DIR (default .kat/cluster); its
// name, which names the namespaces (NAME-node1, ...), is KAT_CLUSTER_NAME
// (default kat). down works from that directory alone, also after a failed
// or interrupted up.
//
// It makes the network and the directories only: kat-agent does not run in
// the hosts yet (see the TODO in up).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"kat.dws.rip/kat/scripts/harness"
)

const usage = "usage: cluster up [N] (default 3 hosts) | cluster down"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// command is what the arguments ask for.
type command struct {
	up    bool
	hosts int
}

// parseArgs reads "up [N]" or "down"; a "--" (as task passes its CLI_ARGS
// through) is skipped.
func parseArgs(args []string) (command, error) {
	var rest []string
	for _, a := range args {
		if a != "--" {
			rest = append(rest, a)
		}
	}
	switch {
	case len(rest) == 1 && rest[0] == "down":
		return command{}, nil
	case len(rest) == 1 && rest[0] == "up":
		return command{up: true, hosts: 3}, nil
	case len(rest) == 2 && rest[0] == "up":
		n, err := strconv.Atoi(rest[1])
		if err != nil || n < 1 || n > harness.MaxHosts {
			return command{}, fmt.Errorf("up %s: want a number of hosts from 1 to %d", rest[1], harness.MaxHosts)
		}
		return command{up: true, hosts: n}, nil
	}
	return command{}, fmt.Errorf("%s (got %q)", usage, strings.Join(args, " "))
}

func run(ctx context.Context, args []string, out io.Writer) error {
	cmd, err := parseArgs(args)
	if err != nil {
		return err
	}
	stateDir := envOr("KAT_CLUSTER_DIR", ".kat/cluster")
	if !cmd.up {
		if err := removeContainers(ctx, stateDir, out); err != nil {
			return err
		}
		if err := harness.Down(ctx, stateDir); err != nil {
			return err
		}
		fmt.Fprintf(out, "the harness in %s is down\n", stateDir)
		return nil
	}
	c, err := harness.Up(ctx, harness.Options{Name: envOr("KAT_CLUSTER_NAME", "kat"), Hosts: cmd.hosts, StateDir: stateDir})
	if errors.Is(err, harness.ErrAlreadyUp) {
		return fmt.Errorf("%w (task cluster:down takes it down)", err)
	}
	if err != nil {
		return err
	}
	// TODO(join): start kat-agent in every host once `kat-agent join`
	// exists, each with h.Command so that it runs in the host's namespace:
	//   node1: kat-agent init --config CLUSTER.kat --data-dir h.DataDir
	//          --advertise-address h.Addr --node-name h.Name
	//          --podman-root h.PodmanRoot --podman-runroot h.RunRoot
	//   others: kat-agent join (leader node1's address, the token init
	//          printed) with the same per-host flags.
	// kat-agent has no flags yet for podman's --network-config-dir and
	// --tmpdir (h.NetworkConfigDir, h.TmpDir) nor for the WireGuard
	// interface name, which must differ per host (DESIGN.md); until they
	// exist the hosts would share them. Wait for every node to be Ready in
	// `katcall status` before reporting the cluster up.
	printCluster(out, c)
	return nil
}

func printCluster(out io.Writer, c *harness.Cluster) {
	fmt.Fprintf(out, "harness %s: %d hosts on bridge %s (%v, the machine is %v); state in %s\n\n",
		c.Name, len(c.Hosts), c.Bridge, c.Subnet, c.Gateway, c.StateDir)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tNAMESPACE\tDATA DIR")
	for _, h := range c.Hosts {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", h.Name, h.Addr, h.NetnsPath(), h.DataDir)
	}
	_ = tw.Flush()
	fmt.Fprintln(out, "\npodman flags per host:")
	for _, h := range c.Hosts {
		fmt.Fprintf(out, "  %s: %s\n", h.Name, strings.Join(h.PodmanArgs(), " "))
	}
	h := c.Hosts[0]
	fmt.Fprintf(out, "\nkat-agent does not run in the hosts yet. Enter one with:\n  nsenter --net=%s sh\n", h.NetnsPath())
	fmt.Fprintln(out, "Take it all down with: task cluster:down")
}

// removeContainers removes every container of each host's Podman storage
// before the harness goes down: stopping a kat-agent never stops its
// containers, and their mounts and conmon processes would outlive the hosts.
// A host whose storage root is empty has none.
func removeContainers(ctx context.Context, stateDir string, out io.Writer) error {
	c, err := harness.Load(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, h := range c.Hosts {
		if entries, err := os.ReadDir(h.PodmanRoot); err != nil || len(entries) == 0 {
			continue
		}
		if _, err := exec.LookPath("podman"); err != nil {
			return fmt.Errorf("%s has Podman storage but podman is not installed: %w", h.Name, err)
		}
		args := append(h.PodmanArgs(), "rm", "--all", "--force", "--time", "0")
		if b, err := h.Command(ctx, "podman", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: podman %s: %w: %s", h.Name, strings.Join(args, " "), err, b)
		}
		fmt.Fprintf(out, "%s: removed its containers\n", h.Name)
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
