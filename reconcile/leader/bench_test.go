package leader

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// benchNodes and benchWorkloads × benchReplicas are the cluster of
// BenchmarkPlacement10kOn1kEtcd.
const (
	benchNodes     = 1000
	benchWorkloads = 100
	benchReplicas  = 100
)

// BenchmarkPlacement10kOn1kEtcd places 100 Services of 100 replicas (each
// asking 100m CPU and 128Mi) on 1,000 registered, heartbeating nodes of
// 8 CPUs and 16 GiB, each with a /22 overlay subnet (so every instance gets
// an address, recorded under /kat/ipam), through the leader's placement pass, on an embedded
// etcd that syncs to disk as a node's does. It reports the planning alone
// (PlanAssignments over the view: the scheduler and the assignments it
// makes), the pass with the etcd writes until the view holds them, and the
// process's resident set and heap after the pass. The rates are the
// slowest iteration's: the first, on an etcd whose database file still
// grows, is slower than later ones that reuse its freed pages.
func BenchmarkPlacement10kOn1kEtcd(b *testing.B) {
	cfg := storetest.Config(b)
	cfg.UnsafeNoFsync = false // as a node runs it
	// As the leader writes: over TLS as etcd's root user, auth on.
	st := storetest.StartAsLeader(b, cfg)
	repo := resources.New(st)
	ctx := b.Context()
	benchCluster(b, st, repo)
	var rssMiB, hwmMiB, heapMiB float64
	planRate, passRate := math.Inf(1), math.Inf(1)
	for b.Loop() {
		b.StopTimer()
		if _, err := st.Txn(ctx, nil, []store.Op{{Type: store.OpDeletePrefix, Key: resources.AssignmentsPrefix()},
			{Type: store.OpDeletePrefix, Key: resources.IPAMPrefix()}}, nil); err != nil {
			b.Fatal(err)
		}
		l, err := New(Config{Repo: repo, NodeLossTimeout: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		vctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- l.view.run(vctx) }()
		if err := l.view.waitSynced(ctx); err != nil {
			b.Fatal(err)
		}
		// Planning alone, from the same view the pass reads.
		keys := l.view.desired.Keys()
		now := time.Now().UTC()
		nodes, draining := l.view.schedNodes(now)
		desired := l.view.workloadsOf(keys)
		start := time.Now()
		plan := PlanAssignments(AssignInput{Nodes: nodes, Draining: draining, Desired: desired, Now: now,
			NewSuffix: RandomSuffix, SlotUsed: l.view.slotUsed, HeldIPs: l.view.heldIPs, Rand: l.rng})
		planRate = min(planRate, float64(len(plan.Put))/time.Since(start).Seconds())
		if len(plan.Put) != benchWorkloads*benchReplicas {
			b.Fatalf("planned %d instances, want %d", len(plan.Put), benchWorkloads*benchReplicas)
		}
		b.StartTimer()

		start = time.Now()
		if err := l.placeOnce(ctx, nil); err != nil {
			b.Fatal(err)
		}
		passRate = min(passRate, float64(benchWorkloads*benchReplicas)/time.Since(start).Seconds())

		b.StopTimer()
		if n := l.view.assigns.Len(); n != benchWorkloads*benchReplicas {
			b.Fatalf("%d assignments in etcd, want %d", n, benchWorkloads*benchReplicas)
		}
		rssMiB, hwmMiB = procStatusMiB(b, "VmRSS:"), procStatusMiB(b, "VmHWM:")
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapMiB = float64(ms.HeapAlloc) / (1 << 20)
		stop()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(planRate, "plan-placements/s")
	b.ReportMetric(passRate, "placements/s")
	b.ReportMetric(rssMiB, "RSS-MiB")
	b.ReportMetric(hwmMiB, "peak-RSS-MiB")
	b.ReportMetric(heapMiB, "heap-MiB")
}

// benchCluster registers the nodes, with statuses and heartbeats, and
// applies the workloads.
func benchCluster(b *testing.B, st store.StateStore, repo *resources.Repo) {
	b.Helper()
	ctx := b.Context()
	if _, err := repo.EnsureNamespace(ctx, "ns1", nil); err != nil {
		b.Fatal(err)
	}
	now := time.Now().Unix()
	var ops []store.Op
	put := func(key string, v any) {
		raw, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, store.Op{Type: store.OpPut, Key: key, Value: raw})
	}
	for i := range benchNodes {
		name := fmt.Sprintf("node-%04d", i)
		put(resources.NodeRegistrationKey(name), api.NodeRegistration{Name: name, UID: "uid-" + name,
			Labels: map[string]string{"zone": strconv.Itoa(i % 3)}})
		status := api.NodeStatus{NodeName: name, Timestamp: now}
		status.Resources.Allocatable = api.ResourceList{CPU: "8", Memory: "16Gi"}
		put(resources.NodeStatusKey(name), status)
		put(resources.NodeHeartbeatKey(name), api.NodeHeartbeat{Timestamp: now})
		// A /22 of 10.0.0.0/8 each: every instance gets an address.
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 6), byte(i&63) << 2, 0}), 22)
		ops = append(ops, store.Op{Type: store.OpPut, Key: resources.NodeSubnetKey(name), Value: []byte(subnet.String())},
			store.Op{Type: store.OpPut, Key: resources.SubnetKey(subnet), Value: []byte(name)})
	}
	for len(ops) > 0 {
		n := min(len(ops), 99)
		if _, err := st.Txn(ctx, nil, ops[:n], nil); err != nil {
			b.Fatal(err)
		}
		ops = ops[n:]
	}
	for i := range benchWorkloads {
		files := workloadFiles(b, fmt.Sprintf("w%03d", i), quadlet.TypeService, benchReplicas, "sleep 1d")
		files["workload.kat"] = append(files["workload.kat"], "    resources:\n      requests:\n        cpu: 100m\n        memory: 128Mi\n"...)
		q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err != nil {
			b.Fatal(err)
		}
	}
}

// procStatusMiB returns a field of /proc/self/status given in kB, in MiB.
func procStatusMiB(b *testing.B, field string) float64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
