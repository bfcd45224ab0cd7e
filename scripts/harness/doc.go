// Package harness makes several KAT "hosts" on one machine for the
// multi-node end-to-end tests and for `task cluster:up`: each host is a
// network namespace on a private Linux bridge, with its own data directory,
// Podman storage root, run root, network config directory and temporary
// directory. It is test and development tooling: only packages under scripts
// import it (layout_test.go enforces that).
//
//	c, err := harness.Up(ctx, harness.Options{Name: "kat", Hosts: 3, StateDir: ".kat/cluster"})
//	// ...
//	out, err := c.Hosts[0].Command(ctx, "ip", "-4", "addr").CombinedOutput()
//	// ...
//	err = harness.Down(ctx, ".kat/cluster") // from this process or another one
//
// # kat-agent in the hosts
//
// [Cluster.StartAgents] writes a cluster.kat, runs kat-agent init in host 1
// and kat-agent join (with host 1's join token) in the others, each with
// h.Command and the host's own --data-dir, --podman-root, --podman-runroot,
// --podman-network-config-dir, --podman-tmpdir, --volume-base-path and
// --wg-interface (Host.WGIface, unique on the machine), and
// waits until katcall get nodes lists every node Ready. The agents log to
// Host.AgentLog and record their pid beside it. [Cluster.StopAgents] ends
// them (SIGTERM, then SIGKILL), [Cluster.RemoveContainers] removes their
// containers (those labelled with the host's node and the cluster's UID),
// and Down stops whatever is left in the namespaces anyway.
//
// # Network
//
// Up chooses a /24 of 172.30.0.0/16 that overlaps no address and no route of
// the machine (Options.Subnet overrides it), gives the bridge its first
// address and host i the address after it (host 1 = .2), on the interface
// eth0 of the host's namespace /run/netns/NAME-nodeI. A host has no default
// route: it reaches the other hosts and the bridge address, nothing else, so
// test traffic never leaves the machine. A server on the machine that the
// hosts must reach listens on [Cluster.Gateway] (or on all addresses).
//
// Programs run inside a host with [Host.Command], which enters only the
// network namespace with nsenter --net=/run/netns/NAME (never ip netns exec,
// which remounts /sys and hides the cgroup mounts Podman needs).
//
// # What Up changes on the machine, and how Down puts it back
//
// Up writes its whole plan to StateDir/harness.json before it changes
// anything: the bridge, the namespaces, the veth pairs, the iptables rule and
// the directories, all named from Options.Name so that two harnesses with
// different names never collide. Down reads that file (in any process, also
// after Up failed halfway or its process died), stops the processes left in
// the namespaces, unmounts what is mounted below the host directories, and
// removes each planned object that exists, then the file. It is idempotent.
//
// The one firewall change is an ACCEPT rule at the top of the filter table's
// FORWARD chain for traffic from the bridge to the bridge, with the comment
// "kat-harness NAME": with net.bridge.bridge-nf-call-iptables=1, bridged
// frames pass through FORWARD, where a DROP policy or another program's rules
// could drop them. Down deletes exactly that rule. The harness writes no
// sysctl.
package harness
