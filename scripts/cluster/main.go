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
// or interrupted up. KAT_BASE_IMAGE_SCRIPT is scripts/build-base-image.sh,
// run for every host's Podman storage (default: relative to the working
// directory, the repository's root under task).
//
// up then runs kat-agent in every host, each in the host's namespace with
// its own data dir and Podman storage: host 1 inits the cluster, the others
// join it with host 1's join token. The binaries are bin/kat-agent and
// bin/katcall (task cluster:up builds them; KAT_BIN overrides the
// directory). up returns once katcall lists every node Ready; the agents
// keep running in the background, their logs in each host's directory.
// down stops the agents, removes their containers and everything up made.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
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
		if err := down(ctx, stateDir); err != nil {
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
	bin, err := filepath.Abs(envOr("KAT_BIN", "bin"))
	if err != nil {
		return err
	}
	opts := harness.AgentOptions{Agent: filepath.Join(bin, "kat-agent"), Katcall: filepath.Join(bin, "katcall"),
		BaseImageScript: envOr("KAT_BASE_IMAGE_SCRIPT", "scripts/build-base-image.sh")}
	fmt.Fprintf(out, "harness %s: %d hosts on bridge %s (%v); starting kat-agent in each\n\n", c.Name, len(c.Hosts), c.Bridge, c.Subnet)
	if _, err := c.StartAgents(ctx, opts); err != nil {
		return fmt.Errorf("%w\nthe hosts are still up: task cluster:down removes them", err)
	}
	printCluster(out, c, opts.Katcall)
	return nil
}

func printCluster(out io.Writer, c *harness.Cluster, katcall string) {
	fmt.Fprintf(out, "\nharness %s: %d nodes Ready on bridge %s (%v, the machine is %v); state in %s\n\n",
		c.Name, len(c.Hosts), c.Bridge, c.Subnet, c.Gateway, c.StateDir)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tNAMESPACE\tLOG")
	for _, h := range c.Hosts {
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", h.Name, h.Addr, h.NetnsPath(), h.AgentLog())
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "\nUse katcall against it (node1 is the leader, API %s):\n", c.LeaderAPI())
	fmt.Fprintf(out, "  export KATCONFIG=%s\n  %s get nodes\n", c.KatcallConfig(), katcall)
	fmt.Fprintln(out, "\nPodman of one host (e.g. its containers):")
	h := c.Hosts[len(c.Hosts)-1]
	fmt.Fprintf(out, "  nsenter --net=%s podman %s ps\n", h.NetnsPath(), strings.Join(h.PodmanArgs(), " "))
	fmt.Fprintln(out, "Take it all down with: task cluster:down")
}

// down stops the agents, removes their containers (stopping a kat-agent
// never stops them; their conmon processes and mounts would outlive the
// hosts) and takes the harness down.
func down(ctx context.Context, stateDir string) error {
	c, err := harness.Load(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := c.StopAgents(ctx); err != nil {
		return err
	}
	if err := c.RemoveContainers(ctx); err != nil {
		return err
	}
	return c.Down(ctx)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
