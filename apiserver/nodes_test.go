package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/store/resources"
)

// nodeFixture is a server over three nodes at a fixed time: n1 Ready (beat
// 4s ago) with five instances (2 Service, 1 DaemonService, 2 Job of which
// one succeeded), n2 NotReady (beat long ago) with one Service instance, n3
// never beat (and leads). forgotten records the ForgetNode calls.
type nodeFixture struct {
	*fixture
	now time.Time
	mu  sync.Mutex // guards forgotten and forgetErr
	// forgotten lists ForgetNode's calls; forgetErr is what it returns.
	forgotten []string
	forgetErr error
}

func (nf *nodeFixture) forgot() []string {
	nf.mu.Lock()
	defer nf.mu.Unlock()
	return slices.Clone(nf.forgotten)
}

func (nf *nodeFixture) failForget(err error) {
	nf.mu.Lock()
	defer nf.mu.Unlock()
	nf.forgetErr = err
}

func newNodeFixture(t *testing.T) *nodeFixture {
	t.Helper()
	ctx := context.Background()
	nf := &nodeFixture{now: time.Now().Truncate(time.Second)}
	nf.fixture = newFixture(t, func(sc *apiserver.Config) {
		sc.Now = func() time.Time { return nf.now }
		sc.NodeLossTimeout = time.Minute
		sc.Leader = func(context.Context) (*api.Leader, error) { return &api.Leader{Node: "n3"}, nil }
		sc.ForgetNode = func(_ context.Context, name string) error {
			nf.mu.Lock()
			defer nf.mu.Unlock()
			nf.forgotten = append(nf.forgotten, name)
			return nf.forgetErr
		}
	})
	for _, n := range []string{"n1", "n2", "n3"} {
		reg := api.NodeRegistration{Name: n, UID: "uid-" + n, Labels: map[string]string{resources.NodeNameLabel: n, "zone": "a"}}
		if err := nf.repo.PutNodeRegistration(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	gpu := 0
	as := []api.Assignment{
		{InstanceID: "web-1", Node: "n1", Type: "Service", CPUMillis: 500, MemoryBytes: 64 << 20},
		{InstanceID: "web-2", Node: "n1", Type: "Service", CPUMillis: 500, MemoryBytes: 64 << 20},
		{InstanceID: "mon-1", Node: "n1", Type: "DaemonService", CPUMillis: 100, MemoryBytes: 32 << 20},
		{InstanceID: "job-1", Node: "n1", Type: "Job", CPUMillis: 1000, MemoryBytes: 128 << 20, GPU: &gpu},
		{InstanceID: "job-2", Node: "n1", Type: "Job"},
		{InstanceID: "web-3", Node: "n2", Type: "Service"},
	}
	for i := range as {
		as[i].Namespace, as[i].Workload, as[i].CreatedAt = "default", strings.Split(as[i].InstanceID, "-")[0], nf.now
	}
	if _, err := nf.repo.WriteAssignments(ctx, as, nil); err != nil {
		t.Fatal(err)
	}
	st := api.NodeStatus{NodeName: "n1", Timestamp: nf.now.Add(-4 * time.Second).Unix(), WorkloadInstances: []api.InstanceStatus{
		{InstanceID: "job-1", Phase: api.InstanceRunning}, {InstanceID: "job-2", Phase: api.InstanceSucceeded},
	}}
	if err := nf.repo.PutNodeStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := nf.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n2", Timestamp: nf.now.Add(-time.Hour).Unix()}); err != nil {
		t.Fatal(err)
	}
	return nf
}

func (nf *nodeFixture) registration(t *testing.T, name string) api.NodeRegistration {
	t.Helper()
	reg, err := nf.repo.GetNodeRegistration(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return *reg
}

// TestNodeView: a node shows its readiness, cordon and drain, labels,
// taints, what its instances request, how many are placed and active, and
// its heartbeat's age.
func TestNodeView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nf := newNodeFixture(t)
	if _, err := nf.repo.UpdateNodeRegistration(ctx, "n1", func(reg *api.NodeRegistration) error {
		reg.Unschedulable, reg.Taints = true, []api.Taint{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	nodes, err := nf.client.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes))
	}
	n1 := nodes[0]
	if n1.StatusText() != "Ready,Cordoned" || n1.Instances != 5 || n1.HeartbeatAgeSeconds == nil || *n1.HeartbeatAgeSeconds != 4 {
		t.Fatalf("n1: status %q, instances %d, heartbeat age %v", n1.StatusText(), n1.Instances, n1.HeartbeatAgeSeconds)
	}
	if want := (api.NodeRequested{CPUMillis: 2100, MemoryBytes: 288 << 20, GPUs: 1}); n1.Requested != want {
		t.Fatalf("n1 requested %+v, want %+v", n1.Requested, want)
	}
	if want := map[string]int{"Service": 2, "DaemonService": 1, "Job": 1}; !reflect.DeepEqual(n1.Active, want) {
		t.Fatalf("n1 active %v, want %v (the succeeded job ended)", n1.Active, want)
	}
	if !reflect.DeepEqual(n1.Taints, []api.Taint{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}}) || n1.Labels["zone"] != "a" {
		t.Fatalf("n1 taints %v, labels %v", n1.Taints, n1.Labels)
	}
	if nodes[1].StatusText() != "NotReady" || nodes[2].StatusText() != api.NodeUnknown || nodes[2].HeartbeatAgeSeconds != nil {
		t.Fatalf("n2 %q, n3 %q (heartbeat age %v)", nodes[1].StatusText(), nodes[2].StatusText(), nodes[2].HeartbeatAgeSeconds)
	}
	if _, err := nf.client.DrainNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if n2, err := nf.client.GetNode(ctx, "n2"); err != nil || n2.StatusText() != "NotReady,Draining" {
		t.Fatalf("drained n2: %+v, %v", n2, err)
	}
}

// TestNodeVerbsChangeTheRegistration: each verb writes what it says to the
// node's registration, and only that.
func TestNodeVerbsChangeTheRegistration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nf := newNodeFixture(t)
	c := nf.client
	steps := []struct {
		name string
		do   func() (*api.Node, error)
		want func(reg *api.NodeRegistration)
	}{
		{"cordon", func() (*api.Node, error) { return c.CordonNode(ctx, "n1") },
			func(reg *api.NodeRegistration) { reg.Unschedulable = true }},
		{"drain", func() (*api.Node, error) { return c.DrainNode(ctx, "n1") },
			func(reg *api.NodeRegistration) { reg.Unschedulable, reg.Draining = true, true }},
		{"uncordon", func() (*api.Node, error) { return c.UncordonNode(ctx, "n1") },
			func(reg *api.NodeRegistration) { reg.Unschedulable, reg.Draining = false, false }},
		{"label set and remove", func() (*api.Node, error) {
			b := "b"
			return c.LabelNode(ctx, "n1", map[string]*string{"zone": nil, "disk": &b, "absent": nil})
		}, func(reg *api.NodeRegistration) {
			reg.Labels = map[string]string{resources.NodeNameLabel: "n1", "disk": "b"}
		}},
		{"taint add", func() (*api.Node, error) {
			return c.TaintNode(ctx, "n1", api.TaintChange{Add: []api.Taint{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}, {Key: "gpu", Effect: "PreferNoSchedule"}, {Key: "slow", Effect: "NoSchedule"}}})
		}, func(reg *api.NodeRegistration) {
			reg.Taints = []api.Taint{{Key: "gpu", Value: "yes", Effect: "NoSchedule"}, {Key: "gpu", Effect: "PreferNoSchedule"}, {Key: "slow", Effect: "NoSchedule"}}
		}},
		{"taint same again", func() (*api.Node, error) {
			return c.TaintNode(ctx, "n1", api.TaintChange{Add: []api.Taint{{Key: "slow", Effect: "NoSchedule"}}})
		}, func(*api.NodeRegistration) {}},
		{"taint overwrite", func() (*api.Node, error) {
			return c.TaintNode(ctx, "n1", api.TaintChange{Add: []api.Taint{{Key: "slow", Value: "v", Effect: "NoSchedule"}}, Overwrite: true})
		}, func(reg *api.NodeRegistration) { reg.Taints[2].Value = "v" }},
		{"taint remove by key and effect", func() (*api.Node, error) {
			return c.TaintNode(ctx, "n1", api.TaintChange{Remove: []api.Taint{{Key: "gpu", Effect: "PreferNoSchedule"}}})
		}, func(reg *api.NodeRegistration) { reg.Taints = slices.Delete(reg.Taints, 1, 2) }},
		{"taint remove by key", func() (*api.Node, error) {
			return c.TaintNode(ctx, "n1", api.TaintChange{Remove: []api.Taint{{Key: "gpu"}}})
		}, func(reg *api.NodeRegistration) { reg.Taints = reg.Taints[1:] }},
	}
	want := nf.registration(t, "n1")
	for _, step := range steps {
		n, err := step.do()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want.Labels, want.Taints = copyLabels(want.Labels), slices.Clone(want.Taints)
		step.want(&want)
		got := nf.registration(t, "n1")
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: registration\n%+v\nwant\n%+v", step.name, got, want)
		}
		if n.Name != "n1" || n.Unschedulable != want.Unschedulable || n.Draining != want.Draining || !reflect.DeepEqual(n.Labels, want.Labels) {
			t.Fatalf("%s: answered %+v", step.name, n)
		}
	}
	if n2 := nf.registration(t, "n2"); n2.Unschedulable || len(n2.Taints) > 0 || n2.Labels["zone"] != "a" {
		t.Fatalf("n2 changed: %+v", n2)
	}
}

func copyLabels(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestNodeVerbsRefuseBadInput: bad input is a 4xx naming what is wrong, an
// unknown node a 404, a node's own certificate a 401; none changes anything.
func TestNodeVerbsRefuseBadInput(t *testing.T) {
	t.Parallel()
	nf := newNodeFixture(t)
	if _, err := nf.client.TaintNode(context.Background(), "n1", api.TaintChange{Add: []api.Taint{{Key: "slow", Value: "a", Effect: "NoSchedule"}}}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, contentType, body string
		status                                int
		message                               string
	}{
		{"label key with space", "PATCH", "/v1alpha1/nodes/n1/labels", "application/merge-patch+json", `{"bad key": "v"}`, 400, `labels["bad key"]`},
		{"label key with =", "PATCH", "/v1alpha1/nodes/n1/labels", "application/json", `{"a=b": "v"}`, 400, `labels["a=b"]: key "a=b" must not contain "="`},
		{"label value with space", "PATCH", "/v1alpha1/nodes/n1/labels", "application/json", `{"k": "a b"}`, 400, `labels["k"]: value "a b"`},
		{"label value too long", "PATCH", "/v1alpha1/nodes/n1/labels", "application/json", `{"k": "` + strings.Repeat("x", 254) + `"}`, 400, `labels["k"]: value must be at most 253`},
		{"node name label", "PATCH", "/v1alpha1/nodes/n1/labels", "application/json", `{"kat.dws.rip/nodeName": null}`, 400, `labels["kat.dws.rip/nodeName"]: is set by KAT`},
		{"empty label change", "PATCH", "/v1alpha1/nodes/n1/labels", "application/json", `{}`, 400, "labels: the change is empty"},
		{"label change not JSON", "PATCH", "/v1alpha1/nodes/n1/labels", "application/json", `zone=b`, 400, "label change: invalid JSON"},
		{"label change as YAML", "PATCH", "/v1alpha1/nodes/n1/labels", "application/yaml", `zone: b`, 415, "Content-Type"},
		{"taint effect", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "k", "effect": "NoExecute"}]}`, 400, `add[0].effect: "NoExecute" must be NoSchedule or PreferNoSchedule`},
		{"taint without effect", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "k"}]}`, 400, `add[0].effect`},
		{"taint key empty", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "", "effect": "NoSchedule"}]}`, 400, "add[0].key: key must not be empty"},
		{"taint key with colon", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "a:b", "effect": "NoSchedule"}]}`, 400, `add[0].key: key "a:b" must not contain ":"`},
		{"taint value with colon", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "k", "value": "a:b", "effect": "NoSchedule"}]}`, 400, "add[0].value"},
		{"taint misspelt field", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "k", "efect": "NoSchedule"}]}`, 400, `unknown field "efect"`},
		{"taint remove with value", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"remove": [{"key": "slow", "value": "a"}]}`, 400, "remove[0].value: must be empty"},
		{"taint remove unknown", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"remove": [{"key": "nope"}]}`, 400, "remove[0]: node n1 has no taint nope"},
		{"taint remove other effect", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"remove": [{"key": "slow", "effect": "PreferNoSchedule"}]}`, 400, "no taint slow:PreferNoSchedule"},
		{"taint change empty", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{}`, 400, "the change is empty"},
		{"taint exists", "PATCH", "/v1alpha1/nodes/n1/taints", "application/json", `{"add": [{"key": "slow", "value": "b", "effect": "NoSchedule"}]}`, 409, "already has taint slow=a:NoSchedule; overwrite it with --overwrite"},
		{"delete force not bool", "DELETE", "/v1alpha1/nodes/n1?force=yes please", "", ``, 400, `query parameter "force"`},
		{"delete ready node with instances", "DELETE", "/v1alpha1/nodes/n1", "", ``, 409, "node n1 is Ready and still has 4 instances: drain it first (katcall drain n1 --wait)"},
		{"delete the leader", "DELETE", "/v1alpha1/nodes/n3?force=true", "", ``, 409, "node n3 is the leader: it cannot be deleted while it leads"},
		{"cordon unknown", "POST", "/v1alpha1/nodes/nope/cordon", "", ``, 404, "node nope not found"},
		{"uncordon unknown", "POST", "/v1alpha1/nodes/nope/uncordon", "", ``, 404, "node nope not found"},
		{"drain unknown", "POST", "/v1alpha1/nodes/nope/drain", "", ``, 404, "node nope not found"},
		{"label unknown", "PATCH", "/v1alpha1/nodes/nope/labels", "application/json", `{"k": "v"}`, 404, "node nope not found"},
		{"taint unknown", "PATCH", "/v1alpha1/nodes/nope/taints", "application/json", `{"add": [{"key": "k", "effect": "NoSchedule"}]}`, 404, "node nope not found"},
		{"get unknown", "GET", "/v1alpha1/nodes/nope", "", ``, 404, "node nope not found"},
		{"delete unknown", "DELETE", "/v1alpha1/nodes/nope", "", ``, 404, "node nope not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := nf.snapshot(t)
			path := strings.ReplaceAll(tc.path, " ", "%20")
			status, e := nf.rawType(t, tc.method, path, token, tc.contentType, []byte(tc.body))
			if status != tc.status || !strings.Contains(e.Message, tc.message) {
				t.Fatalf("%s %s: %d %q, want %d with %q", tc.method, tc.path, status, e.Message, tc.status, tc.message)
			}
			if after := nf.snapshot(t); after != before {
				t.Fatalf("the refused request changed the store:\n%s\nwas\n%s", after, before)
			}
		})
	}
	if forgot := nf.forgot(); len(forgot) > 0 {
		t.Fatalf("a refused delete forgot %v", forgot)
	}
}

// TestNodeVerbsRefuseAgents: a node's certificate, enough to report its
// own status, opens none of the operator verbs, not even on itself.
func TestNodeVerbsRefuseAgents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nf := newNodeFixture(t)
	agent := nodeClient(t, nf.fixture, "n1")
	before := nf.snapshot(t)
	v := "x"
	calls := map[string]func() error{
		"cordon":   func() error { _, err := agent.CordonNode(ctx, "n1"); return err },
		"uncordon": func() error { _, err := agent.UncordonNode(ctx, "n1"); return err },
		"drain":    func() error { _, err := agent.DrainNode(ctx, "n1"); return err },
		"label":    func() error { _, err := agent.LabelNode(ctx, "n1", map[string]*string{"k": &v}); return err },
		"taint": func() error {
			_, err := agent.TaintNode(ctx, "n1", api.TaintChange{Add: []api.Taint{{Key: "k", Effect: "NoSchedule"}}})
			return err
		},
		"delete":       func() error { return agent.DeleteNode(ctx, "n1", true) },
		"token rotate": func() error { _, err := agent.RotateJoinToken(ctx); return err },
	}
	for name, call := range calls {
		if err := call(); statusOf(err) != http.StatusUnauthorized {
			t.Errorf("%s with n1's certificate: %v, want 401", name, err)
		}
	}
	if after := nf.snapshot(t); after != before {
		t.Fatalf("an agent's request changed the store:\n%s\nwas\n%s", after, before)
	}
}

// TestDeleteNode: a NotReady node is deleted without --force, a Ready one
// with instances only with it; each delete forgets the node's identity
// first and removes its registration, status and assignments; a failure to
// forget leaves the node in place.
func TestDeleteNode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nf := newNodeFixture(t)
	nf.failForget(errors.New("etcd user busy"))
	before := nf.snapshot(t)
	if err := nf.client.DeleteNode(ctx, "n2", false); statusOf(err) != http.StatusInternalServerError || !strings.Contains(err.Error(), `forget the identity of node "n2": etcd user busy`) {
		t.Fatalf("delete with a failing ForgetNode: %v", err)
	}
	if nf.snapshot(t) != before {
		t.Fatal("a delete whose ForgetNode failed changed the store")
	}
	nf.failForget(nil)
	if err := nf.client.DeleteNode(ctx, "n2", false); err != nil {
		t.Fatalf("delete NotReady n2: %v", err)
	}
	if err := nf.client.DeleteNode(ctx, "n1", true); err != nil {
		t.Fatalf("delete n1 with force: %v", err)
	}
	if want := []string{"n2", "n2", "n1"}; !slices.Equal(nf.forgot(), want) {
		t.Fatalf("forgot %v, want %v", nf.forgot(), want)
	}
	nodes, err := nf.client.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].Name != "n3" || !nodes[0].Leader {
		t.Fatalf("nodes after delete: %+v, %v", nodes, err)
	}
	for _, n := range []string{"n1", "n2"} {
		if as, err := nf.repo.ListAssignments(ctx, n); err != nil || len(as) > 0 {
			t.Fatalf("assignments of %s: %v, %v", n, as, err)
		}
		if _, err := nf.repo.GetNodeStatus(ctx, n); !errors.Is(err, resources.ErrNotFound) {
			t.Fatalf("status of %s: %v", n, err)
		}
	}
}

// TestRotateJoinTokenRoute: the route answers the hook's token, and 503
// where no hook is set.
func TestRotateJoinTokenRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, func(sc *apiserver.Config) {
		sc.RotateJoinToken = func(context.Context) (string, error) { return "katjoin1.new", nil }
	})
	if tok, err := f.client.RotateJoinToken(ctx); err != nil || tok != "katjoin1.new" {
		t.Fatalf("rotate: %q, %v", tok, err)
	}
	plain := newFixture(t, nil)
	if _, err := plain.client.RotateJoinToken(ctx); statusOf(err) != http.StatusServiceUnavailable {
		t.Fatalf("rotate without a hook: %v, want 503", err)
	}
}

// TestNodeViewCountsFromTheTermStart: heartbeats reach etcd through the
// leader, so a node that beat before this leader's term is Ready until
// NodeLossTimeout after the term began, as placement counts it; its
// heartbeat's age is still the real one.
func TestNodeViewCountsFromTheTermStart(t *testing.T) {
	t.Parallel()
	now := time.Now().Truncate(time.Second)
	for _, tc := range []struct {
		name      string
		termStart time.Time
		want      string
	}{
		{"term began 30s ago", now.Add(-30 * time.Second), api.NodeReady},
		{"term began 2m ago", now.Add(-2 * time.Minute), api.NodeNotReady},
		{"no term start", time.Time{}, api.NodeNotReady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, func(sc *apiserver.Config) {
				sc.Now = func() time.Time { return now }
				sc.NodeLossTimeout = time.Minute
				sc.TermStart = tc.termStart
			})
			if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", UID: "u1"}); err != nil {
				t.Fatal(err)
			}
			if err := f.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: now.Add(-time.Hour).Unix()}); err != nil {
				t.Fatal(err)
			}
			n, err := f.client.GetNode(ctx, "n1")
			if err != nil {
				t.Fatal(err)
			}
			if n.Status != tc.want || n.HeartbeatAgeSeconds == nil || *n.HeartbeatAgeSeconds != 3600 {
				t.Fatalf("status %q, heartbeat age %v; want %s, 3600", n.Status, n.HeartbeatAgeSeconds, tc.want)
			}
		})
	}
}

// TestNodeDeparture: a node's certificate tells the leader its node
// departs; the node is then NotReady,Departed though it beats, with a
// NodeDeparted event; another node's certificate may not depart it.
func TestNodeDeparture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nf := newNodeFixture(t)
	started := nf.now.Add(-time.Hour).UTC()
	n2 := nodeClient(t, nf.fixture, "n2")
	if err := n2.PostNodeDeparture(ctx, "n1", api.NodeDeparture{AgentStartedAt: started}); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("n2 departing n1: %v, want 401", err)
	}
	n1 := nodeClient(t, nf.fixture, "n1")
	if err := n1.PostNodeDeparture(ctx, "n1", api.NodeDeparture{AgentStartedAt: started}); err != nil {
		t.Fatalf("n1 departs: %v", err)
	}
	if err := nf.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: nf.now.Unix(), AgentStartedAt: started}); err != nil {
		t.Fatal(err)
	}
	n, err := nf.client.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got := n.StatusText(); got != api.NodeNotReady+","+api.NodeDeparted {
		t.Errorf("status of the departed node = %q, want NotReady,Departed", got)
	}
	evs, err := nf.repo.ListEvents(ctx, 0)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Reason != resources.EventNodeDeparted {
		t.Errorf("events %+v (%v), want NodeDeparted last", evs, err)
	}
	// Its agent started again: Ready.
	if err := nf.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: nf.now.Unix(), AgentStartedAt: nf.now}); err != nil {
		t.Fatal(err)
	}
	if n, err := nf.client.GetNode(ctx, "n1"); err != nil || n.StatusText() != api.NodeReady {
		t.Errorf("status of the node whose agent started again = %q (%v), want Ready", n.StatusText(), err)
	}
}
