package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

type topOptions struct {
	namespace string
	instances bool
	output    string
}

func newTopCommand(g *globals) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top nodes|workloads [NAME]",
		Short: "Show what nodes and workloads use: CPU, memory, disk and network, as the agents last sampled them",
		Long: `top shows the usage each agent samples at every heartbeat (agentTickSeconds): CPU over
the interval before the sample and memory in use, with the share of the node's capacity for
nodes; disk and network bytes counted since the node booted or the container started.
"top workloads" sums a workload's running containers over every node; --instances shows
each container.`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: completeKindThenName(g, "nodes", "workloads"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := parseFormat(o.output)
			if err != nil {
				return err
			}
			kind, err := resourceKind(args[0])
			if err != nil {
				return err
			}
			if kind != "nodes" && kind != "workloads" {
				return fmt.Errorf("top: %q is not nodes or workloads", args[0])
			}
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			nodes, err := c.ListNodes(cmd.Context())
			if err != nil {
				return err
			}
			if kind == "nodes" {
				return topNodes(g, nodes, name, f, time.Now())
			}
			return topWorkloads(g, nodes, o, name, f)
		},
	}
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "top workloads: only this namespace (default: all)")
	cmd.Flags().BoolVar(&o.instances, "instances", false, "top workloads: one row per instance, with its node")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// nodeTop is one row of top nodes.
type nodeTop struct {
	Name string `json:"name"`
	// Usage is nil for a node that sent none.
	Usage *api.NodeUsage `json:"usage,omitempty"`
	// CPUPercent and MemoryPercent are the shares of the node's capacity.
	CPUPercent    *float64 `json:"cpuPercent,omitempty"`
	MemoryPercent *float64 `json:"memoryPercent,omitempty"`
}

func topNodes(g *globals, nodes []api.Node, name string, f outputFormat, now time.Time) error {
	var rows []nodeTop
	for _, n := range nodes {
		if name != "" && n.Name != name {
			continue
		}
		r := nodeTop{Name: n.Name, Usage: n.Usage}
		if u := n.Usage; u != nil {
			if c, err := quadlet.ParseCPU(n.Resources.Capacity.CPU); err == nil && c > 0 {
				r.CPUPercent = ptr(100 * float64(u.CPUMillis) / float64(c))
			}
			if m, err := quadlet.ParseMemory(n.Resources.Capacity.Memory); err == nil && m > 0 {
				r.MemoryPercent = ptr(100 * float64(u.MemoryBytes) / float64(m))
			}
		}
		r.Usage = withoutContainers(r.Usage)
		rows = append(rows, r)
	}
	if name != "" && len(rows) == 0 {
		return fmt.Errorf("node %q not found", name)
	}
	if f != formatTable {
		return printData(g.stdout, f, rows)
	}
	t := newTable(g.stdout, "NAME", "CPU", "CPU%", "MEMORY", "MEMORY%", "DISK READ/WRITTEN", "NET RX/TX", "PEERS", "SAMPLED")
	for _, r := range rows {
		if r.Usage == nil {
			t.row(r.Name, "-", "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		u := r.Usage
		sampled := time.Unix(u.SampledAt, 0)
		t.row(r.Name, fmt.Sprintf("%dm", u.CPUMillis), percent(r.CPUPercent), sizeText(u.MemoryBytes), percent(r.MemoryPercent),
			sizeText(u.DiskReadBytes)+"/"+sizeText(u.DiskWriteBytes), sizeText(u.NetworkRxBytes)+"/"+sizeText(u.NetworkTxBytes),
			peersText(u.OverlayPeers, sampled), age(now, sampled))
	}
	return t.flush()
}

// withoutContainers is u without its containers (top workloads shows
// them), nil for nil.
func withoutContainers(u *api.NodeUsage) *api.NodeUsage {
	if u == nil {
		return nil
	}
	c := *u
	c.Containers = nil
	return &c
}

// workloadTop is one row of top workloads: a workload's running
// containers summed, or with --instances one container.
type workloadTop struct {
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	// Instance and Node are set with --instances.
	Instance string `json:"instance,omitempty"`
	Node     string `json:"node,omitempty"`
	// Instances counts the running containers summed.
	Instances int `json:"instances"`
	api.ResourceUsage
}

func topWorkloads(g *globals, nodes []api.Node, o *topOptions, name string, f outputFormat) error {
	type key struct{ ns, name, inst string }
	sums := map[key]*workloadTop{}
	for _, n := range nodes {
		if n.Usage == nil {
			continue
		}
		for _, c := range n.Usage.Containers {
			if (o.namespace != "" && c.Namespace != o.namespace) || (name != "" && c.Workload != name) {
				continue
			}
			k := key{c.Namespace, c.Workload, ""}
			if o.instances {
				k.inst = c.InstanceID
			}
			w := sums[k]
			if w == nil {
				w = &workloadTop{Namespace: c.Namespace, Workload: c.Workload}
				if o.instances {
					w.Instance, w.Node = c.InstanceID, n.Name
				}
				sums[k] = w
			}
			w.Instances++
			w.CPUMillis += c.CPUMillis
			w.MemoryBytes += c.MemoryBytes
			w.DiskReadBytes += c.DiskReadBytes
			w.DiskWriteBytes += c.DiskWriteBytes
			w.NetworkRxBytes += c.NetworkRxBytes
			w.NetworkTxBytes += c.NetworkTxBytes
		}
	}
	rows := make([]workloadTop, 0, len(sums))
	for _, w := range sums {
		rows = append(rows, *w)
	}
	slices.SortFunc(rows, func(a, b workloadTop) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Workload, b.Workload), cmp.Compare(a.Instance, b.Instance))
	})
	if f != formatTable {
		return printData(g.stdout, f, rows)
	}
	headers := []string{"NAMESPACE", "NAME", "INSTANCES", "CPU", "MEMORY", "DISK READ/WRITTEN", "NET RX/TX"}
	if o.instances {
		headers = []string{"NAMESPACE", "NAME", "INSTANCE", "NODE", "CPU", "MEMORY", "DISK READ/WRITTEN", "NET RX/TX"}
	}
	t := newTable(g.stdout, headers...)
	for _, w := range rows {
		cols := []string{w.Namespace, w.Workload, fmt.Sprint(w.Instances)}
		if o.instances {
			cols = []string{w.Namespace, w.Workload, w.Instance, w.Node}
		}
		t.row(append(cols, fmt.Sprintf("%dm", w.CPUMillis), sizeText(w.MemoryBytes),
			sizeText(w.DiskReadBytes)+"/"+sizeText(w.DiskWriteBytes), sizeText(w.NetworkRxBytes)+"/"+sizeText(w.NetworkTxBytes))...)
	}
	return t.flush()
}

// peersText renders the overlay peers as "fresh/all": how many had a
// handshake within peerFresh of the sample, "-" without any peer.
func peersText(peers []api.OverlayPeer, sampled time.Time) string {
	if len(peers) == 0 {
		return "-"
	}
	fresh := 0
	for _, p := range peers {
		if !p.LastHandshake.IsZero() && sampled.Sub(p.LastHandshake) <= peerFresh {
			fresh++
		}
	}
	return fmt.Sprintf("%d/%d", fresh, len(peers))
}

// peerFresh is how old a peer's last handshake may be for top to count it:
// WireGuard renews a session every two minutes while traffic flows.
const peerFresh = 3 * time.Minute

func ptr[T any](v T) *T { return &v }

// percent renders a share as "12%", "-" when unknown.
func percent(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", *p)
}

// sizeText renders bytes in the largest binary unit it reaches, with one
// decimal: "512B", "1.5Ki", "12.0Mi".
func sizeText(b int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if b >= u.size {
			return fmt.Sprintf("%.1f%s", float64(b)/float64(u.size), u.suffix)
		}
	}
	return fmt.Sprintf("%dB", b)
}
