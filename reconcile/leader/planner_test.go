package leader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

const gib = int64(1) << 30

// wopts shape a fixture workload of the placement tests.
type wopts struct {
	replicas int
	restart  string // restartPolicy.condition; default Always
	memory   string // requests.memory; default none
	selector string // "k=v" nodeSelector; default none
	tolerate string // "k=v:Effect" toleration; default none
}

func schedWorkload(t testing.TB, name, typ string, o wopts) workload {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata:\n  name: %s\n  namespace: ns1\nspec:\n  type: %s\n", name, typ)
	if typ == quadlet.TypeService {
		fmt.Fprintf(&b, "  replicas: %d\n", o.replicas)
	}
	if o.restart == "" {
		o.restart = quadlet.RestartAlways
	}
	fmt.Fprintf(&b, "  source:\n    image: localhost/kat-base:latest\n  restartPolicy:\n    condition: %s\n", o.restart)
	if o.selector != "" {
		k, v, _ := strings.Cut(o.selector, "=")
		fmt.Fprintf(&b, "  nodeSelector:\n    %s: %s\n", k, v)
	}
	if o.tolerate != "" {
		kv, eff, _ := strings.Cut(o.tolerate, ":")
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "  tolerations:\n  - key: %s\n    operator: Equal\n    value: %s\n    effect: %s\n", k, v, eff)
	}
	b.WriteString("  container:\n    command: [\"/bin/sh\", \"-c\", \"sleep 1d\"]\n")
	if o.memory != "" {
		fmt.Fprintf(&b, "    resources:\n      requests:\n        memory: %s\n", o.memory)
	}
	files := map[string][]byte{"workload.kat": []byte(b.String())}
	if typ == quadlet.TypeJob {
		files["job.kat"] = []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: JobDefinition\nspec: {}\n")
	}
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: name, Type: typ, Generation: 1}, files)
}

// inst is a current instance of w on node, made at second created.
func inst(w workload, node, suffix string, created int) api.Assignment {
	return api.Assignment{
		InstanceID: InstanceID(w.Meta.Name, w.Spec.TemplateHash, suffix), Node: node, Namespace: "ns1", Workload: w.Meta.Name,
		Type: w.Meta.Type, SpecHash: w.Meta.SpecHash, TemplateHash: w.Spec.TemplateHash, CreatedAt: time.Unix(int64(created), 0),
		MemoryBytes: w.Spec.Request.Memory, CPUMillis: w.Spec.Request.CPU,
	}
}

// node is a Ready node of 4 CPUs and 8 GiB; mods change it.
func node(name string, mods ...func(*sched.Node)) sched.Node {
	n := sched.Node{Name: name, Ready: true, CPU: 4000, Memory: 8 * gib}
	for _, m := range mods {
		m(&n)
	}
	return n
}

func notReady(n *sched.Node) { n.Ready = false }
func cordoned(n *sched.Node) { n.Cordoned = true }
func memory(b int64) func(*sched.Node) {
	return func(n *sched.Node) { n.Memory = b }
}
func label(k, v string) func(*sched.Node) {
	return func(n *sched.Node) { n.Labels = map[string]string{k: v} }
}
func taint(k, v, effect string) func(*sched.Node) {
	return func(n *sched.Node) { n.Taints = append(n.Taints, sched.Taint{Key: k, Value: v, Effect: effect}) }
}

// perNode renders the puts as "node:count" in node order.
func perNode(as []api.Assignment) string {
	counts := map[string]int{}
	for _, a := range as {
		counts[a.Node]++
	}
	var out []string
	for n, c := range counts {
		out = append(out, fmt.Sprintf("%s:%d", n, c))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func TestPlanAssignmentsOnNodes(t *testing.T) {
	t.Parallel()
	svc, dmn := quadlet.TypeService, quadlet.TypeDaemonService
	web6 := schedWorkload(t, "web", svc, wopts{replicas: 6, memory: "256Mi"})
	web3 := schedWorkload(t, "web", svc, wopts{replicas: 3, memory: "256Mi"})
	web2 := schedWorkload(t, "web", svc, wopts{replicas: 2, memory: "256Mi"})
	web1 := schedWorkload(t, "web", svc, wopts{replicas: 1, memory: "256Mi"})
	big3 := schedWorkload(t, "big", svc, wopts{replicas: 3, memory: "768Mi"})
	big2 := schedWorkload(t, "big2", svc, wopts{replicas: 2, memory: "768Mi"})
	zoned := schedWorkload(t, "zoned", svc, wopts{replicas: 3, selector: "zone=y"})
	tolerant := schedWorkload(t, "tol", svc, wopts{replicas: 2, tolerate: "dedicated=gpu:NoSchedule"})
	edge := schedWorkload(t, "edge", dmn, wopts{selector: "role=edge"})
	every := schedWorkload(t, "every", dmn, wopts{})
	bigDaemon := schedWorkload(t, "bigd", dmn, wopts{memory: "768Mi"})
	edgeLabel := label("role", "edge")
	ready := func(as ...api.Assignment) map[string]api.InstanceStatus {
		m := map[string]api.InstanceStatus{}
		for _, a := range as {
			m[a.InstanceID] = api.InstanceStatus{InstanceID: a.InstanceID, Phase: api.InstanceRunning, HealthStatus: api.HealthHealthy}
		}
		return m
	}
	// Two instances on draining node a, their replacements on b and c.
	drainNodes := []sched.Node{node("a", cordoned), node("b"), node("c")}
	replaced := []api.Assignment{inst(web2, "a", "x", 1), inst(web2, "a", "y", 2), inst(web2, "b", "p", 3), inst(web2, "c", "q", 3)}
	tests := []struct {
		name     string
		nodes    []sched.Node
		draining []string
		departed []string
		desired  []workload
		current  []api.Assignment
		reported map[string]api.InstanceStatus
		wantPut  string   // puts per node
		wantDel  []string // deleted instance IDs
		wantSch  string   // Scheduling of the first desired workload
	}{
		{
			name:    "6 replicas spread 2/2/2 over 3 equal nodes",
			nodes:   []sched.Node{node("a"), node("b"), node("c")},
			desired: []workload{web6},
			wantPut: "a:2 b:2 c:2", wantSch: "desired 6 unplaced 0",
		},
		{
			name:    "nodeSelector keeps instances on matching nodes",
			nodes:   []sched.Node{node("a", label("zone", "x")), node("b", label("zone", "y"))},
			desired: []workload{zoned},
			wantPut: "b:3", wantSch: "desired 3 unplaced 0",
		},
		{
			name:    "NoSchedule taint keeps instances off",
			nodes:   []sched.Node{node("a", taint("dedicated", "gpu", sched.NoSchedule)), node("b")},
			desired: []workload{web2},
			wantPut: "b:2", wantSch: "desired 2 unplaced 0",
		},
		{
			name:    "a toleration lets them on",
			nodes:   []sched.Node{node("a", taint("dedicated", "gpu", sched.NoSchedule)), node("b")},
			desired: []workload{tolerant},
			wantPut: "a:1 b:1", wantSch: "desired 2 unplaced 0",
		},
		{
			name:    "cordon stops new placements and keeps what runs",
			nodes:   []sched.Node{node("a", cordoned), node("b")},
			desired: []workload{web3},
			current: []api.Assignment{inst(web3, "a", "x", 1)},
			wantPut: "b:2", wantSch: "desired 3 unplaced 0",
		},
		{
			name: "instances that fit nowhere are pending with the reason per node class",
			nodes: []sched.Node{node("a", memory(gib)), node("b", memory(gib)),
				node("c", taint("dedicated", "gpu", sched.NoSchedule))},
			desired: []workload{big3},
			wantPut: "a:1 b:1",
			wantSch: "desired 3 unplaced 1 reason 3 nodes: 2 insufficient memory, 1 taint dedicated=gpu:NoSchedule",
		},
		{
			name:    "workloads planned together see each other's placements",
			nodes:   []sched.Node{node("a", memory(gib)), node("b", memory(gib))},
			desired: []workload{big3, big2},
			wantPut: "a:1 b:1", wantSch: "desired 3 unplaced 1 reason 2 nodes: 2 insufficient memory",
		},
		{
			name:    "DaemonService: one instance per eligible node",
			nodes:   []sched.Node{node("a", edgeLabel), node("b", edgeLabel), node("c")},
			desired: []workload{edge},
			current: []api.Assignment{inst(edge, "a", "x", 1)},
			wantPut: "b:1", wantSch: "desired 2 unplaced 0",
		},
		{
			name:    "DaemonService pending on an eligible node without room",
			nodes:   []sched.Node{node("a", memory(gib)), node("b", memory(gib/2))},
			desired: []workload{bigDaemon},
			wantPut: "a:1", wantSch: "desired 2 unplaced 1 reason 2 nodes: 1 insufficient memory",
		},
		{
			name:    "DaemonService leaves nodes that are no longer eligible",
			nodes:   []sched.Node{node("a", edgeLabel), node("b", edgeLabel, cordoned), node("c"), node("d", edgeLabel, taint("k", "v", sched.NoSchedule))},
			desired: []workload{edge},
			current: []api.Assignment{inst(edge, "a", "x", 1), inst(edge, "b", "y", 1), inst(edge, "c", "z", 1), inst(edge, "d", "w", 1), inst(edge, "gone", "v", 1)},
			wantDel: []string{inst(edge, "", "v", 0).InstanceID, inst(edge, "", "w", 0).InstanceID, inst(edge, "", "y", 0).InstanceID, inst(edge, "", "z", 0).InstanceID},
			wantSch: "desired 1 unplaced 0",
		},
		{
			name:    "DaemonService is not moved off a NotReady node",
			nodes:   []sched.Node{node("a", notReady), node("b")},
			desired: []workload{every}, current: []api.Assignment{inst(every, "a", "x", 1)},
			wantPut: "b:1", wantSch: "desired 2 unplaced 0",
		},
		{
			name:     "DaemonService leaves a departed node",
			nodes:    []sched.Node{node("a", notReady), node("b")},
			departed: []string{"a"},
			desired:  []workload{every}, current: []api.Assignment{inst(every, "a", "x", 1), inst(every, "b", "y", 1)},
			wantDel: []string{inst(every, "", "x", 0).InstanceID}, wantSch: "desired 1 unplaced 0",
		},
		{
			name:    "Service instances of a lost node are replaced: exactly replicas on Ready nodes",
			nodes:   []sched.Node{node("a", notReady), node("b"), node("c")},
			desired: []workload{web3},
			current: []api.Assignment{inst(web3, "a", "x", 1), inst(web3, "a", "y", 2), inst(web3, "b", "z", 3)},
			wantPut: "b:1 c:1", wantDel: []string{inst(web3, "", "x", 0).InstanceID, inst(web3, "", "y", 0).InstanceID},
			wantSch: "desired 3 unplaced 0",
		},
		{
			name:    "a lost instance with no room elsewhere stays until a replacement fits",
			nodes:   []sched.Node{node("a", notReady), node("b", memory(gib))},
			desired: []workload{big2},
			current: []api.Assignment{inst(big2, "a", "x", 1), inst(big2, "b", "y", 2)},
			wantSch: "desired 2 unplaced 1 reason 2 nodes: 1 insufficient memory, 1 not ready",
		},
		{
			name:    "scaling down removes lost instances first",
			nodes:   []sched.Node{node("a", notReady), node("b")},
			desired: []workload{web1},
			current: []api.Assignment{inst(web1, "b", "x", 1), inst(web1, "a", "y", 2)},
			wantDel: []string{inst(web1, "", "y", 0).InstanceID}, wantSch: "desired 1 unplaced 0",
		},
		{
			name:     "drain: Service replacements are placed first, the old ones stay",
			nodes:    []sched.Node{node("a", cordoned), node("b"), node("c")},
			draining: []string{"a"},
			desired:  []workload{web2},
			current:  []api.Assignment{inst(web2, "a", "x", 1), inst(web2, "a", "y", 2)},
			reported: ready(inst(web2, "", "x", 0), inst(web2, "", "y", 0)),
			wantPut:  "b:1 c:1", wantSch: "desired 2 unplaced 0",
		},
		{
			name:  "drain: while the replacements are not ready the old ones stay",
			nodes: drainNodes, draining: []string{"a"}, desired: []workload{web2}, current: replaced,
			reported: ready(inst(web2, "", "x", 0), inst(web2, "", "y", 0)),
			wantSch:  "desired 2 unplaced 0",
		},
		{
			name:  "drain: once the replacements are ready the old ones go",
			nodes: drainNodes, draining: []string{"a"}, desired: []workload{web2}, current: replaced,
			reported: ready(inst(web2, "", "p", 0), inst(web2, "", "q", 0)),
			wantDel:  []string{inst(web2, "", "x", 0).InstanceID, inst(web2, "", "y", 0).InstanceID}, wantSch: "desired 2 unplaced 0",
		},
		{
			name:     "drain: with nowhere to go the instance goes at once, pending",
			nodes:    []sched.Node{node("a", cordoned), node("b", cordoned)},
			draining: []string{"a"},
			desired:  []workload{web1},
			current:  []api.Assignment{inst(web1, "a", "x", 1)},
			wantDel:  []string{inst(web1, "", "x", 0).InstanceID}, wantSch: "desired 1 unplaced 1 reason 2 nodes: 2 cordoned",
		},
		{
			name:     "drain: DaemonService instances are removed",
			nodes:    []sched.Node{node("a", cordoned), node("b")},
			draining: []string{"a"},
			desired:  []workload{every},
			current:  []api.Assignment{inst(every, "a", "x", 1), inst(every, "b", "y", 1)},
			wantDel:  []string{inst(every, "", "x", 0).InstanceID}, wantSch: "desired 1 unplaced 0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			draining, departed := map[string]bool{}, map[string]bool{}
			for _, n := range tc.draining {
				draining[n] = true
			}
			for _, n := range tc.departed {
				departed[n] = true
			}
			// Used from the current assignments, as the leader counts it.
			nodes := slices.Clone(tc.nodes)
			applyAssigned(nodes, tc.current)
			n := 0
			plan := PlanAssignments(AssignInput{
				Nodes: nodes, Draining: draining, Departed: departed, Desired: tc.desired, Current: tc.current, Reported: tc.reported,
				Now: time.Unix(100, 0), NewSuffix: func() string { n++; return fmt.Sprintf("s%d", n) },
			})
			if got := perNode(plan.Put); got != tc.wantPut {
				t.Errorf("puts = %q, want %q", got, tc.wantPut)
			}
			want := tc.wantDel
			if want == nil {
				want = []string{}
			}
			if got := ids(plan.Delete); !slices.Equal(got, want) {
				t.Errorf("deletes = %v, want %v", got, want)
			}
			sc := plan.Scheduling[tc.desired[0].Key()]
			got := fmt.Sprintf("desired %d unplaced %d", sc.Desired, sc.Unplaced)
			if sc.Reason != "" {
				got += " reason " + sc.Reason
			}
			if got != tc.wantSch {
				t.Errorf("scheduling = %q, want %q", got, tc.wantSch)
			}
			for _, a := range plan.Put {
				w := tc.desired[slices.IndexFunc(tc.desired, func(w workload) bool { return w.Meta.Name == a.Workload })]
				if a.MemoryBytes != w.Spec.Request.Memory || a.CPUMillis != w.Spec.Request.CPU {
					t.Errorf("put %s requests %d cpu %d memory, want the workload's %+v", a.InstanceID, a.CPUMillis, a.MemoryBytes, w.Spec.Request)
				}
			}
		})
	}
}

// TestSchedNodes: a node's readiness follows its heartbeat age, cordon
// and drain both cordon, and Used adds up the requests of the assignments
// on it, GPUs held marked in use.
func TestSchedNodes(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	st := &api.NodeStatus{GPUs: []api.GPU{{Index: 0, Driver: "nvidia", VRAMMiB: 8000}, {Index: 1, Driver: "nvidia", VRAMMiB: 8000}}}
	st.Resources.Allocatable = api.ResourceList{CPU: "2", Memory: "4Gi"}
	nodes := []resources.Node{
		{Registration: api.NodeRegistration{Name: "a", Taints: []api.Taint{{Key: "k", Effect: "NoSchedule"}}}, Status: st, Heartbeat: now.Add(-60 * time.Second)},
		{Registration: api.NodeRegistration{Name: "b", Draining: true}, Heartbeat: now.Add(-61 * time.Second)},
		{Registration: api.NodeRegistration{Name: "c", Unschedulable: true}},
	}
	g := 1
	as := []api.Assignment{
		{Node: "a", CPUMillis: 500, MemoryBytes: gib, GPU: &g}, {Node: "a", CPUMillis: 250}, {Node: "gone", CPUMillis: 1},
	}
	got, draining := SchedNodes(nodes, as, now, 60*time.Second)
	a := got[0]
	if !a.Ready || a.Cordoned || a.CPU != 2000 || a.Memory != 4*gib || a.Used.CPU != 750 || a.Used.Memory != gib ||
		a.GPUs[0].InUse || !a.GPUs[1].InUse || len(a.Taints) != 1 || a.Taints[0].String() != "k:NoSchedule" {
		t.Errorf("a = %+v", a)
	}
	if b := got[1]; b.Ready || !b.Cordoned {
		t.Errorf("b (heartbeat 61 s old, draining) = %+v", b)
	}
	if c := got[2]; c.Ready || !c.Cordoned {
		t.Errorf("c (never beat, cordoned) = %+v", c)
	}
	if !draining["b"] || len(draining) != 1 {
		t.Errorf("draining = %v", draining)
	}
}
