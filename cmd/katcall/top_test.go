package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestTop: top nodes shows each node's last usage with its share of the
// node's capacity ("-" for a node that sent none), top workloads sums a
// workload's containers over the nodes or shows each with --instances, and
// a kind top does not know is refused naming it.
func TestTop(t *testing.T) {
	t.Parallel()
	c := newRealCluster(t)
	ctx := context.Background()
	cu := func(ns, w, inst string, cpu, mem int64) api.ContainerUsage {
		return api.ContainerUsage{Namespace: ns, Workload: w, InstanceID: inst, ResourceUsage: api.ResourceUsage{
			CPUMillis: cpu, MemoryBytes: mem, NetworkRxBytes: 3 << 20, NetworkTxBytes: 1 << 10}}
	}
	for _, st := range []api.NodeStatus{
		{NodeName: "n1", Timestamp: time.Now().Unix(), Resources: api.NodeResources{Capacity: api.ResourceList{CPU: "2000m", Memory: "4096Mi"}},
			Usage: &api.NodeUsage{SampledAt: time.Now().Unix(), ResourceUsage: api.ResourceUsage{CPUMillis: 500, MemoryBytes: 1 << 30,
				DiskReadBytes: 1536, DiskWriteBytes: 10 << 20},
				OverlayPeers: []api.OverlayPeer{{Node: "n2", LastHandshake: time.Now().Add(-time.Minute)},
					{Node: "n3", LastHandshake: time.Now().Add(-time.Hour)}, {Node: "n4"}},
				Containers: []api.ContainerUsage{cu("default", "web", "web-1", 120, 64<<20), cu("default", "mon", "mon-1", 5, 8<<20)}}},
	} {
		if err := c.repo.PutNodeStatus(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n2", Timestamp: time.Now().Unix(),
		Usage: &api.NodeUsage{Containers: []api.ContainerUsage{cu("default", "web", "web-2", 80, 32<<20), cu("other", "web", "web-3", 1, 1)}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"nodes", []string{"top", "nodes"}, []string{
			"NAME   CPU    CPU%   MEMORY   MEMORY%   DISK READ/WRITTEN   NET RX/TX   PEERS   SAMPLED",
			"n1     500m   25%    1.0Gi    25%       1.5Ki/10.0Mi        0B/0B       1/3     ",
			"n2     0m     -      0B       -         0B/0B               0B/0B       -       ",
		}},
		{"one node", []string{"top", "node", "n1", "-o", "json"}, []string{`"cpuPercent": 25`, `"memoryBytes": 1073741824`}},
		{"workloads", []string{"top", "workloads"}, []string{
			"NAMESPACE   NAME   INSTANCES   CPU    MEMORY   DISK READ/WRITTEN   NET RX/TX",
			"default     mon    1           5m     8.0Mi    0B/0B               3.0Mi/1.0Ki",
			"default     web    2           200m   96.0Mi   0B/0B               6.0Mi/2.0Ki",
			"other       web    1           1m     1B       0B/0B               3.0Mi/1.0Ki",
		}},
		{"instances of a workload", []string{"top", "workloads", "web", "-n", "default", "--instances"}, []string{
			"NAMESPACE   NAME   INSTANCE   NODE   CPU    MEMORY   DISK READ/WRITTEN   NET RX/TX",
			"default     web    web-1      n1     120m   64.0Mi   0B/0B               3.0Mi/1.0Ki",
			"default     web    web-2      n2     80m    32.0Mi   0B/0B               3.0Mi/1.0Ki",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := c.katcall(tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if code, _, errOut := c.katcall("top", "sources"); code == 0 || !strings.Contains(errOut, `"sources" is not nodes or workloads`) {
		t.Errorf("top sources: exit %d, %q; want a refusal naming it", code, errOut)
	}
	if code, _, errOut := c.katcall("top", "nodes", "n9"); code == 0 || !strings.Contains(errOut, `node "n9" not found`) {
		t.Errorf("top nodes n9: exit %d, %q; want node not found", code, errOut)
	}
}
