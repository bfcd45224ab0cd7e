package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// assignTable assigns instances ids of a Service restarted Always whose
// VirtualLoadBalancer publishes 8080 and checks health every second.
func assignTable(tb testing.TB, t *instanceTable, ids ...string) {
	tb.Helper()
	q, err := quadlet.ParseWorkload(workloadFiles(quadlet.RestartAlways, "httpd -f", true), quadlet.ParseOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	assignQuadlet(t, q, ids...)
}

// assignQuadlet assigns instances ids of workload q.
func assignQuadlet(t *instanceTable, q *quadlet.Quadlet, ids ...string) {
	var as []api.Assignment
	for _, id := range ids {
		as = append(as, api.Assignment{InstanceID: id, Namespace: "ns1", Workload: "web", Image: "localhost/kat-base:latest"})
	}
	t.assign(as, func(a api.Assignment) (assignedInstance, bool) {
		return assignedInstance{a: a, q: q, rule: ruleOf(q, time.Second)}, true
	})
}

// running is a running container of instance id, publishing hostPort.
func running(id string, started time.Time, hostPort int) runtime.ContainerStatus {
	c := runtime.ContainerStatus{ID: "c-" + id, State: runtime.StateRunning, StartedAt: started,
		Labels: map[string]string{runtime.LabelInstance: id}}
	if hostPort != 0 {
		c.Ports = []runtime.PortMapping{{HostPort: hostPort, ContainerPort: 8080}}
	}
	return c
}

// tasksOf renders tasks as "kind id" lines, sorted.
func tasksOf(ts []task) []string {
	var out []string
	for _, t := range ts {
		kind := map[taskKind]string{taskProbe: "probe", taskVerify: "verify"}[t.kind]
		if t.kind == taskStep {
			kind = t.step.String()
		}
		out = append(out, kind+" "+t.id)
	}
	slices.Sort(out)
	return out
}

// TestTableOneStepPerInstance: next starts one step per instance and none
// for an instance whose step is under way, until endStep ends it.
func TestTableOneStepPerInstance(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tb := newInstanceTable()
	assignTable(t, tb, "web-1", "web-2")
	if got, want := tasksOf(tb.next(now)), []string{"create web-1", "create web-2"}; !slices.Equal(got, want) {
		t.Fatalf("first pass: %v, want %v", got, want)
	}
	if got := tasksOf(tb.next(now)); len(got) != 0 {
		t.Fatalf("a pass while both creates are under way started %v", got)
	}
	c := running("web-1", now, 8080)
	tb.endStep("web-1", restartRule{}, stepEnd{step: stepCreate}, &c, true, now)
	fail := errors.New("podman run: boom")
	st, v, wait := tb.endStep("web-2", restartRule{Backoff: time.Second}, stepEnd{step: stepCreate, err: fail}, nil, false, now)
	if v != verdictRetry || wait != time.Second || st.Message != fail.Error() {
		t.Fatalf("failed create: verdict %d, wait %s, state %+v", v, wait, st)
	}
	// web-1 runs (and gets its health check), web-2 waits out its
	// back-off, then is created again.
	if got, want := tasksOf(tb.next(now)), []string{"probe web-1"}; !slices.Equal(got, want) {
		t.Fatalf("a pass with web-1 running and web-2 backing off: %v, want %v", got, want)
	}
	if got, want := tasksOf(tb.next(now.Add(time.Second))), []string{"create web-2"}; !slices.Equal(got, want) {
		t.Fatalf("after the back-off: %v, want %v", got, want)
	}
}

// TestTableStepOutlivesOlderListings: what a step left a container as
// holds against a listing started before the step ended, and gives way to
// the first listing started after it.
func TestTableStepOutlivesOlderListings(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		// before is what the container was before the step; after what the
		// step left it as (nil: removed).
		before, after *runtime.ContainerStatus
		assigned      bool
		step          stepKind
	}{
		{name: "a create", after: &runtime.ContainerStatus{ID: "c-web-1", State: runtime.StateRunning}, assigned: true, step: stepCreate},
		{name: "a removal", before: &runtime.ContainerStatus{ID: "c-web-1", State: runtime.StateRunning,
			Labels: map[string]string{runtime.LabelInstance: "web-1"}}, step: stepRemove},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tb := newInstanceTable()
			if tc.assigned {
				assignTable(t, tb, "web-1")
			}
			var listed []runtime.ContainerStatus
			if tc.before != nil {
				listed = append(listed, *tc.before)
			}
			tb.applyListing(tb.startListing(), listed)
			if got := tasksOf(tb.next(now)); !slices.Equal(got, []string{tc.step.String() + " web-1"}) {
				t.Fatalf("tasks %v, want the %s of web-1", got, tc.step)
			}
			stale := tb.startListing() // started before the step ends
			tb.endStep("web-1", restartRule{}, stepEnd{step: tc.step}, tc.after, true, now)
			tb.applyListing(stale, listed)
			if c, ok := tb.container("web-1"); ok != (tc.after != nil) || (ok && c.ID != tc.after.ID) {
				t.Fatalf("after a stale listing: container %+v (%v), want what the step left: %+v", c, ok, tc.after)
			}
			if got := tasksOf(tb.next(now)); len(got) != 0 {
				t.Fatalf("a stale listing made the table repeat the step: %v", got)
			}
			tb.applyListing(tb.startListing(), nil)
			if _, ok := tb.container("web-1"); ok {
				t.Fatal("a listing started after the step did not replace what the step left")
			}
		})
	}
}

// TestTableHostPorts: a reserved host port goes to one instance only and
// never to a port a listed container publishes; a reservation ends with a
// failed create, once a listing shows the container, or when the instance
// is no longer assigned.
func TestTableHostPorts(t *testing.T) {
	t.Parallel()
	free := func(int) bool { return true }
	// Two spare ports, apart from the kernel's ephemeral ones.
	spare := runtime.PortRange{First: 20391, Last: 20392}
	inSpare := func(p int) bool { return p >= spare.First && p <= spare.Last }
	tb := newInstanceTable()
	assignTable(t, tb, "web-1", "web-2", "web-3")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("old", time.Time{}, 8080)})
	p1 := tb.reserveHostPorts("web-1", []int{8080}, false, free, spare)[8080]
	p2 := tb.reserveHostPorts("web-2", []int{8080}, false, free, spare)[8080]
	if p1 == p2 || !inSpare(p1) || !inSpare(p2) {
		t.Fatalf("host ports %d and %d, want the two spare ports (8080 is published, each reserved once)", p1, p2)
	}
	if p := tb.reserveHostPorts("web-3", []int{8080}, false, free, spare); len(p) != 0 {
		t.Fatalf("with every spare port reserved, web-3 got %v, want none", p)
	}
	tb.releaseHostPorts("web-2") // its create failed
	if p := tb.reserveHostPorts("web-3", []int{8080}, false, free, spare)[8080]; p != p2 {
		t.Fatalf("after web-2's create failed, web-3 got %d, want web-2's port %d", p, p2)
	}
	// A listing shows web-1's container (publishing p1), and the old one
	// gone; web-3 is assigned no more.
	assignTable(t, tb, "web-1")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("web-1", time.Time{}, p1)})
	if p := tb.reserveHostPorts("web-9", []int{8080, p1}, false, free, spare); p[8080] != 8080 || p[p1] != p2 {
		t.Fatalf("got %v, want 8080 itself (the old container went) and, for %d (web-1 publishes it), %d (web-3 assigned no more)",
			p, p1, p2)
	}

	// A container port taken on the host gets a spare one.
	tb = newInstanceTable()
	assignTable(t, tb, "web-1")
	if p := tb.reserveHostPorts("web-1", []int{9090}, false, func(int) bool { return false }, spare)[9090]; !inSpare(p) {
		t.Fatalf("9090, taken on the host: got %d, want a spare port", p)
	}
	// A DaemonService's port is its own number even when taken: its
	// container fails and is retried rather than move off it.
	if p := tb.reserveHostPorts("web-1", []int{80}, true, func(int) bool { return false }, spare)[80]; p != 80 {
		t.Fatalf("a DaemonService's port 80, taken on the host: got %d, want 80 itself", p)
	}
}

// TestTableStopFirstOnFixedPorts: a DaemonService instance whose port is
// published at its own number is not created while a container leaving the
// node (unassigned, or its removal under way) still publishes that port;
// once the removal ends, it is. An assigned container holding the port does
// not hold the create up (the create fails and says why).
func TestTableStopFirstOnFixedPorts(t *testing.T) {
	t.Parallel()
	files := workloadFiles(quadlet.RestartAlways, "httpd -f", true)
	files["workload.kat"] = []byte(strings.Replace(string(files["workload.kat"]), "type: Service\n  replicas: 1", "type: DaemonService", 1))
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	tb := newInstanceTable()
	assignQuadlet(tb, q, "new")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("old", now, 8080)})
	if got, want := tasksOf(tb.next(now)), []string{"remove old"}; !slices.Equal(got, want) {
		t.Fatalf("the old instance unassigned, the new one assigned: %v, want %v", got, want)
	}
	if got := tasksOf(tb.next(now)); len(got) != 0 {
		t.Fatalf("a pass while the old container's removal is under way started %v, want nothing", got)
	}
	tb.endStep("old", restartRule{}, stepEnd{step: stepRemove}, nil, true, now)
	if got, want := tasksOf(tb.next(now)), []string{"create new"}; !slices.Equal(got, want) {
		t.Fatalf("after the old container's removal: %v, want %v", got, want)
	}

	// A Service's port moves to a spare one: its create never waits.
	tb = newInstanceTable()
	assignTable(t, tb, "web-2")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("web-1", now, 8080)})
	if got, want := tasksOf(tb.next(now)), []string{"create web-2", "remove web-1"}; !slices.Equal(got, want) {
		t.Fatalf("a Service: %v, want %v", got, want)
	}

	// An assigned container holding the port: the create goes ahead.
	tb = newInstanceTable()
	assignQuadlet(tb, q, "other", "new")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("other", now, 8080)})
	if got, want := tasksOf(tb.next(now)), []string{"create new", "probe other"}; !slices.Equal(got, want) {
		t.Fatalf("the port held by an assigned container: %v, want %v", got, want)
	}
}

// TestTableDropsStateOfGoneInstances: an instance's state (its restart
// count) survives while it is assigned, has a container or a step under
// way, and is dropped once none holds.
func TestTableDropsStateOfGoneInstances(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tb := newInstanceTable()
	tb.seed(map[string]instanceState{"web-1": {Restarts: 3}, "gone-1": {Restarts: 1}})
	assignTable(t, tb, "web-1")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("old-1", now, 0)})
	if got, want := tasksOf(tb.next(now)), []string{"create web-1", "remove old-1"}; !slices.Equal(got, want) {
		t.Fatalf("tasks %v, want %v", got, want)
	}
	if reps := tb.reports(); len(reps) != 1 || reps[0].Restarts != 3 {
		t.Fatalf("reports %+v, want web-1 with its 3 restarts", reps)
	}
	tb.applyListing(tb.startListing(), nil) // old-1's container missed while its removal runs
	tb.next(now)
	if _, kept := tb.state["old-1"]; !kept {
		t.Error("the state of old-1 went while its removal was under way")
	}
	if _, kept := tb.state["gone-1"]; kept {
		t.Error("the state of gone-1 (neither assigned, listed nor stepped) was kept")
	}
	tb.endStep("old-1", restartRule{}, stepEnd{step: stepRemove}, nil, true, now)
	tb.next(now)
	if _, kept := tb.state["old-1"]; kept {
		t.Error("the state of old-1 was kept after its removal")
	}
	assignTable(t, tb) // web-1 assigned no more, its create under way
	tb.next(now)
	if _, kept := tb.state["web-1"]; !kept {
		t.Error("the state of web-1 went while its create was under way")
	}
}

// TestTableOneProbeAtATime: a due health check starts once until it ends;
// a result for a container the instance no longer runs, or of a check the
// agent's stop cut short, changes nothing.
func TestTableOneProbeAtATime(t *testing.T) {
	t.Parallel()
	start := time.Unix(1000, 0)
	q, err := quadlet.ParseWorkload(workloadFiles(quadlet.RestartAlways, "httpd -f", true), quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := healthCheckOf(q)
	tb := newInstanceTable()
	assignTable(t, tb, "web-1")
	tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("web-1", start, 0)})
	due := start // no initialDelaySeconds
	if got := tasksOf(tb.next(due)); !slices.Equal(got, []string{"probe web-1"}) {
		t.Fatalf("tasks %v, want web-1's check", got)
	}
	if got := tasksOf(tb.next(due)); len(got) != 0 {
		t.Fatalf("a second check started while the first runs: %v", got)
	}
	if healthy, _ := tb.endProbe("web-1", "c-web-1", hc, true, false, due); healthy {
		t.Fatal("a check cut short by the agent's stop counted")
	}
	if got := tasksOf(tb.next(due)); !slices.Equal(got, []string{"probe web-1"}) {
		t.Fatalf("tasks %v, want web-1's check again", got)
	}
	if healthy, _ := tb.endProbe("web-1", "c-other", hc, true, true, due); healthy {
		t.Fatal("a check of another container counted")
	}
	tb.next(due)
	if healthy, a := tb.endProbe("web-1", "c-web-1", hc, true, true, due); !healthy || a.InstanceID != "web-1" {
		t.Fatalf("a passed check: healthy %v (%s), want web-1 healthy", healthy, a.InstanceID)
	}
	if reps := tb.reports(); reps[0].HealthStatus != api.HealthHealthy {
		t.Fatalf("report %+v, want healthy", reps[0])
	}
}

// TestTableReportsIfChanged: the reports are handed out as changed once
// per change.
func TestTableReportsIfChanged(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tb := newInstanceTable()
	assignTable(t, tb, "web-1")
	var changes []bool
	for i := range 4 {
		if i == 2 {
			tb.applyListing(tb.startListing(), []runtime.ContainerStatus{running("web-1", now, 0)})
		}
		_, changed := tb.reportsIfChanged()
		changes = append(changes, changed)
	}
	if fmt.Sprint(changes) != "[true false true false]" {
		t.Fatalf("changed %v, want [true false true false]", changes)
	}
}
