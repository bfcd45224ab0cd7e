package agent

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// agentEnv is an agent over a real embedded etcd and a fake runtime.
type agentEnv struct {
	t         *testing.T
	repo      *resources.Repo
	rt        *fakeRuntime
	builder   Builder
	buildAuth api.GitAuth
	checkHost func(context.Context) error
	networks  Networks
	// logger is the agent's logger. Default: none.
	logger zerolog.Logger
	// restartBackoff is the agent's RestartBackoff. Default 10ms.
	restartBackoff time.Duration
	// leave is the agent's Leave. Default nil.
	leave func(string) bool
}

// testCluster is the cluster UID of the agents these tests start.
const testCluster = "cluster-uid-1"

// testLogMaxSize is the log bound of the agents these tests start.
const testLogMaxSize = 256 << 10

func newAgentEnv(t *testing.T) *agentEnv {
	t.Helper()
	return &agentEnv{t: t, repo: resources.New(storetest.New(t)), rt: newFakeRuntime()}
}

// start runs an agent until the returned stop is called (or the test ends).
func (e *agentEnv) start() (ag *Agent, stop func()) {
	e.t.Helper()
	ag, err := NewAgent(AgentConfig{
		Repo: e.repo, Node: "n1", ClusterUID: testCluster, Runtime: e.rt, Resync: 200 * time.Millisecond, Tick: 20 * time.Millisecond,
		RestartBackoff: cmp.Or(e.restartBackoff, 10*time.Millisecond), Builder: e.builder, BuildAuth: e.buildAuth, CheckHost: e.checkHost,
		Logger: e.logger, Networks: e.networks, Leave: e.leave, ClusterDomain: "kat.test", LogMaxSize: testLogMaxSize,
		BuildSpec: func(a api.Assignment, q *quadlet.Quadlet, in SpecInputs) (runtime.ContainerSpec, error) {
			spec := runtime.ContainerSpec{Name: "kat_" + a.InstanceID, Image: a.Image, Command: q.Workload.Spec.Container.Command}
			for c, h := range in.HostPorts {
				spec.Ports = append(spec.Ports, runtime.PortMapping{HostPort: h, ContainerPort: c})
			}
			return spec, nil
		},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := ag.Run(ctx); err != nil {
			e.t.Errorf("agent: %v", err)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	e.t.Cleanup(stop)
	return ag, stop
}

// idle makes an agent that is not started, with a spec builder that
// builds nothing.
func (e *agentEnv) idle() *Agent {
	e.t.Helper()
	ag, err := NewAgent(AgentConfig{Repo: e.repo, Node: "n1", ClusterUID: testCluster, Runtime: e.rt,
		BuildSpec: func(api.Assignment, *quadlet.Quadlet, SpecInputs) (runtime.ContainerSpec, error) {
			return runtime.ContainerSpec{}, nil
		}})
	if err != nil {
		e.t.Fatal(err)
	}
	return ag
}

// assign writes an assignment of a workload with the given restart policy
// and command; hc adds a VirtualLoadBalancer with an exec health check.
func (e *agentEnv) assign(id, restart, cmd string, hc bool) api.Assignment {
	e.t.Helper()
	files := workloadFiles(restart, cmd, hc)
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		e.t.Fatal(err)
	}
	a := api.Assignment{InstanceID: id, Node: "n1", Namespace: "ns1", Workload: "web", SpecHash: "h", Generation: 1,
		Image: "localhost/kat-base:latest", RestartPolicy: restart, Files: files, CreatedAt: time.Now()}
	if _, err := e.repo.WriteAssignments(context.Background(), []api.Assignment{a}, nil); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// workloadFiles are the files of workload ns1/web, a Service with the
// given restart policy and command; hc adds a VirtualLoadBalancer publishing
// 8080 with an exec health check every second.
func workloadFiles(restart, cmd string, hc bool) map[string][]byte {
	files := map[string][]byte{"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: %s, maxRestarts: 2, resetSeconds: 3600}
  container:
    command: ["/bin/sh", "-c", %q]
`, restart, cmd)}
	if hc {
		files["VirtualLoadBalancer.kat"] = []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports: [{containerPort: 8080}]
  healthCheck:
    exec: {command: ["true"]}
    periodSeconds: 1
    failureThreshold: 1
`)
	}
	return files
}

// waitFor polls cond until it holds or 10 seconds pass.
func (e *agentEnv) waitFor(what string, ag *Agent, cond func(map[string]api.InstanceStatus) bool) map[string]api.InstanceStatus {
	e.t.Helper()
	var got map[string]api.InstanceStatus
	polltest.UntilErr(e.t, 10*time.Second, what, func() error {
		got = map[string]api.InstanceStatus{}
		for _, is := range ag.Instances() {
			got[is.InstanceID] = is
		}
		if cond(got) {
			return nil
		}
		return fmt.Errorf("instances: %+v; containers: %+v", got, e.rt.byInstance())
	})
	return got
}

func TestAgentRunsRestartsAndAdopts(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", true)
	ag, stop := e.start()
	got := e.waitFor("web-1 running and healthy", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Ready()
	})
	firstID := got["web-1"].ContainerID

	e.rt.exit(firstID, 137)
	got = e.waitFor("a restart", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Restarts == 1 && m["web-1"].Phase == api.InstanceRunning
	})
	if got["web-1"].ContainerID != firstID {
		t.Fatalf("restart replaced container %s by %s", firstID, got["web-1"].ContainerID)
	}

	// Report what the heartbeat would, stop the agent, start a new one: it
	// adopts the running container and keeps the restart count.
	if err := e.repo.PutNodeStatus(context.Background(), api.NodeStatus{NodeName: "n1", WorkloadInstances: ag.Instances()}); err != nil {
		t.Fatal(err)
	}
	stop()
	if c := e.rt.byInstance()["web-1"]; c.State != runtime.StateRunning {
		t.Fatalf("stopping the agent left the container %s", c.State)
	}
	creates, starts := e.rt.counts()
	ag2, _ := e.start()
	got = e.waitFor("adoption", ag2, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning
	})
	if got["web-1"].ContainerID != firstID || got["web-1"].Restarts != 1 {
		t.Fatalf("after agent restart: container %s restarts %d; want %s and 1", got["web-1"].ContainerID, got["web-1"].Restarts, firstID)
	}
	if c2, s2 := e.rt.counts(); c2 != creates || s2 != starts {
		t.Fatalf("agent restart created %d and started %d containers", c2-creates, s2-starts)
	}
	var buf bytes.Buffer
	if err := ag2.Logs(context.Background(), "web-1", api.LogOptions{}, &buf); err != nil || buf.String() != "log of "+firstID+"\n" {
		t.Fatalf("Logs = %q, %v", buf.String(), err)
	}
	if err := ag2.Logs(context.Background(), "nope", api.LogOptions{}, &buf); err == nil {
		t.Fatal("Logs of an unknown instance succeeded")
	}
}

func TestAgentMaxCountFails(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.assign("bad-1", quadlet.RestartMaxCount, "exit 1", false)
	ag, _ := e.start()
	got := e.waitFor("failed", ag, func(m map[string]api.InstanceStatus) bool {
		return m["bad-1"].Phase == api.InstanceFailed
	})
	if got["bad-1"].Restarts != 2 || got["bad-1"].Message == "" {
		t.Fatalf("failed instance: %+v; want 2 restarts and a message", got["bad-1"])
	}
	if _, starts := e.rt.counts(); starts != 3 {
		t.Fatalf("%d starts, want 3 (the first and 2 restarts)", starts)
	}
}

func TestAgentNeverAndUnassigned(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.assign("once-1", quadlet.RestartNever, "exit 1", false)
	a := e.assign("keep-1", quadlet.RestartAlways, "sleep 1000", false)
	ag, _ := e.start()
	e.waitFor("never fails, always runs", ag, func(m map[string]api.InstanceStatus) bool {
		return m["once-1"].Phase == api.InstanceFailed && m["once-1"].Restarts == 0 && m["keep-1"].Phase == api.InstanceRunning
	})
	if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{a}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the unassigned container removed", func() bool {
		_, ok := e.rt.byInstance()["keep-1"]
		return !ok
	})
	if _, ok := e.rt.byInstance()["once-1"]; !ok {
		t.Fatal("the failed instance's container was removed although still assigned")
	}
}

func TestAgentReportsUnhealthy(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.rt.execCode = 1
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", true)
	ag, _ := e.start()
	e.waitFor("unhealthy", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].HealthStatus == api.HealthUnhealthy && !m["web-1"].Ready()
	})
}

func TestAgentGivesReplicasDistinctHostPorts(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", true)
	e.assign("web-2", quadlet.RestartAlways, "httpd -f", true)
	ag, _ := e.start()
	got := e.waitFor("two running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning && m["web-2"].Phase == api.InstanceRunning
	})
	p1, p2 := got["web-1"].Ports, got["web-2"].Ports
	if len(p1) != 1 || len(p2) != 1 || p1[0].HostPort == p2[0].HostPort || p1[0].ContainerPort != 8080 {
		t.Fatalf("published ports %+v and %+v; want 8080 published on two different host ports", p1, p2)
	}
	// A replica that cannot have 8080 gets a port of the host-port range,
	// never one of the kernel's ephemeral ports (where a published port
	// would capture other programs' local connections).
	r := runtime.DefaultHostPorts
	for _, p := range []int{p1[0].HostPort, p2[0].HostPort} {
		if p != 8080 && (p < r.First || p > r.Last) {
			t.Errorf("host port %d: want 8080 or a port of %s", p, r)
		}
	}
}

// TestAgentMovesOffATakenHostPort: a container whose picked host port turns
// out taken when it starts (something took it after the pick) is removed
// and made again on another port, instead of being started again for as
// long as the port stays taken.
func TestAgentMovesOffATakenHostPort(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.rt.takenHostPorts = map[int]bool{8080: true}
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", true)
	ag, _ := e.start()
	got := e.waitFor("web-1 running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning
	})
	if p := got["web-1"].Ports; len(p) != 1 || p[0].ContainerPort != 8080 || p[0].HostPort == 8080 {
		t.Fatalf("published ports %+v; want 8080 published on another host port", p)
	}
	e.rt.mu.Lock()
	defer e.rt.mu.Unlock()
	if len(e.rt.c) != 1 || e.rt.creates < 2 {
		t.Errorf("%d containers after %d creates; want the one on another port, the clashing one removed", len(e.rt.c), e.rt.creates)
	}
}

// TestAgentReportsMissingHostPrerequisite: while a program the runtime needs
// is missing (iptables for netavark), the node reports RuntimeReady=False
// saying what to install, and creates that fail for it are retried, not
// failed; once it is installed, the condition clears and the instance runs.
func TestAgentReportsMissingHostPrerequisite(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	missing := fmt.Errorf("%w: iptables is not in PATH (/usr/bin:/bin): netavark needs it; install it with `apt-get install iptables`",
		runtime.ErrHostPrerequisite)
	var mu sync.Mutex
	hostErr := missing
	e.checkHost = func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		return hostErr
	}
	e.rt.mu.Lock()
	e.rt.createErr = fmt.Errorf("podman run: Error: netavark: No such file or directory (os error 2): %w", missing)
	e.rt.mu.Unlock()
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	ag, _ := e.start()
	runtimeReady := func() api.Condition {
		for _, c := range ag.Conditions() {
			if c.Type == "RuntimeReady" {
				return c
			}
		}
		t.Fatal("no RuntimeReady condition")
		return api.Condition{}
	}
	e.waitFor("the create retried with the reason", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstancePending && strings.Contains(m["web-1"].Message, "apt-get install iptables")
	})
	if c := runtimeReady(); c.Status != api.ConditionFalse || c.Reason != "HostPrerequisiteMissing" || !strings.Contains(c.Message, "iptables") {
		t.Fatalf("RuntimeReady = %+v", c)
	}
	// iptables installed: the next resync sees it, the create goes through.
	mu.Lock()
	hostErr = nil
	mu.Unlock()
	e.rt.mu.Lock()
	e.rt.createErr = nil
	e.rt.mu.Unlock()
	e.waitFor("the instance running once installed", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning
	})
	polltest.Until(t, 10*time.Second, "RuntimeReady back to True", func() bool { return runtimeReady().Status == api.ConditionTrue })
}

// assignFiles writes an assignment of workload web from its files.
func (e *agentEnv) assignFiles(id string, files map[string][]byte) api.Assignment {
	e.t.Helper()
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		e.t.Fatal(err)
	}
	a := api.Assignment{InstanceID: id, Node: "n1", Namespace: "ns1", Workload: "web", SpecHash: "h", Generation: 1,
		Image: "localhost/kat-base:latest", RestartPolicy: quadlet.RestartAlways, Files: files, CreatedAt: time.Now()}
	if _, err := e.repo.WriteAssignments(context.Background(), []api.Assignment{a}, nil); err != nil {
		e.t.Fatal(err)
	}
	return a
}

func graceWorkload(grace string) map[string][]byte {
	return map[string][]byte{"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Always}
  container:
    command: ["httpd", "-f"]
%s`, grace)}
}

// TestAgentStopGrace: a removed container gets its workload's
// stopGracePeriodSeconds (podman's 10s when it sets none), also once the
// workload is gone and only the container's label tells.
func TestAgentStopGrace(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	short := e.assignFiles("short-1", graceWorkload("    stopGracePeriodSeconds: 3\n"))
	def := e.assignFiles("default-1", graceWorkload(""))
	ag, _ := e.start()
	e.waitFor("both running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["short-1"].Phase == api.InstanceRunning && m["default-1"].Phase == api.InstanceRunning
	})
	if l := e.rt.byInstance()["short-1"].Labels[runtime.LabelStopGrace]; l != "3" {
		t.Errorf("short-1's %s label = %q, want 3", runtime.LabelStopGrace, l)
	}
	if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{short, def}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "both removed", func() bool { return len(e.rt.byInstance()) == 0 })
	e.rt.mu.Lock()
	graces := slices.Sorted(slices.Values(e.rt.graces))
	e.rt.mu.Unlock()
	if !slices.Equal(graces, []time.Duration{3 * time.Second, 10 * time.Second}) {
		t.Errorf("stop graces %v, want 3s and 10s", graces)
	}
}

// TestAgentBoundsContainerLogs: every container the agent runs has the
// cluster's log bound.
func TestAgentBoundsContainerLogs(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	ag, _ := e.start()
	e.waitFor("running", ag, func(m map[string]api.InstanceStatus) bool { return m["web-1"].Phase == api.InstanceRunning })
	e.rt.mu.Lock()
	defer e.rt.mu.Unlock()
	if got := e.rt.specs["kat_web-1"].LogMaxSize; got != testLogMaxSize {
		t.Fatalf("the container's LogMaxSize is %d, want the agent's %d", got, testLogMaxSize)
	}
}

// TestAgentRemovalHoldsNoStep: while an old container takes its stop grace,
// a new instance is created and runs (with a single step slot): removals
// have a pool of their own.
func TestAgentRemovalHoldsNoStep(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.rt.removeBlock = make(chan struct{})
	old := e.assign("old-1", quadlet.RestartAlways, "httpd -f", false)
	ag, err := NewAgent(AgentConfig{Repo: e.repo, Node: "n1", ClusterUID: testCluster, Runtime: e.rt, MaxConcurrentSteps: 1, Tick: 20 * time.Millisecond,
		BuildSpec: func(a api.Assignment, q *quadlet.Quadlet, _ SpecInputs) (runtime.ContainerSpec, error) {
			return runtime.ContainerSpec{Name: "kat_" + a.InstanceID, Image: a.Image}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	defer func() { close(e.rt.removeBlock); cancel(); <-done }()
	e.waitFor("the old instance running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["old-1"].Phase == api.InstanceRunning
	})
	// Replace it: the old one's removal blocks (its grace), the new one
	// starts meanwhile.
	if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{old}); err != nil {
		t.Fatal(err)
	}
	e.assign("new-1", quadlet.RestartAlways, "httpd -f", false)
	e.waitFor("the new instance running while the old one stops", ag, func(m map[string]api.InstanceStatus) bool {
		return m["new-1"].Phase == api.InstanceRunning
	})
	if _, there := e.rt.byInstance()["old-1"]; !there {
		t.Fatal("the old container went before its removal was released")
	}
}

// TestAgentStoppedWhileStartingIsNoFailure: an agent whose context ends
// while it starts (a SIGTERM right after kat-agent started) returns nil, as
// after any stop, not the error of the watch it was opening.
func TestAgentStoppedWhileStartingIsNoFailure(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	ag := e.idle()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := ag.Run(ctx); err != nil {
		t.Fatalf("Run with an ended context = %v, want nil", err)
	}
}

// TestAgentStopLetsARunFinish: a container run under way when the agent
// stops is not cut short (a podman run killed half way leaves a container
// Podman no longer lists but runc runs); the agent returns once it is done.
func TestAgentStopLetsARunFinish(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.rt.runBlock, e.rt.running = make(chan struct{}), make(chan struct{}, 1)
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	_, stop := e.start()
	<-e.rt.running // the run is under way
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("the agent returned while its run was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(e.rt.runBlock)
	<-stopped
	if c, ok := e.rt.byInstance()["web-1"]; !ok || c.State != runtime.StateRunning {
		t.Fatalf("after the stop, the run's container is %+v (found %v), want it created and running", c, ok)
	}
}

// TestListsAfter: only events that change a container's state without a
// step of the agent ask for a listing.
func TestListsAfter(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	ag := e.idle()
	// web-2's container is assigned no more: its removal is under way.
	ag.table.applyListing(ag.table.startListing(), []runtime.ContainerStatus{
		{ID: "c2", State: runtime.StateRunning, Labels: map[string]string{runtime.LabelInstance: "web-2"}}})
	if ts := ag.table.next(time.Now()); len(ts) != 1 || ts[0].step != stepRemove {
		t.Fatalf("tasks %+v, want web-2's removal", ts)
	}
	for _, tc := range []struct {
		action, instance string
		want             bool
	}{
		{action: runtime.ActionCreate, instance: "web-1"},
		{action: runtime.ActionInit, instance: "web-1"},
		{action: runtime.ActionStart, instance: "web-1"},
		{action: "exec", instance: "web-1"},
		{action: "exec_died", instance: "web-1"},
		{action: runtime.ActionDied, instance: "web-1", want: true},
		{action: runtime.ActionOOM, instance: "web-1", want: true},
		{action: runtime.ActionRemove, instance: "", want: true}, // a container without an instance label
		{action: runtime.ActionDied, instance: "web-2"},          // its removal says so itself
		{action: runtime.ActionRemove, instance: "web-2"},
	} {
		ev := runtime.Event{ID: "c", Action: tc.action, Labels: map[string]string{}}
		if tc.instance != "" {
			ev.Labels[runtime.LabelInstance] = tc.instance
		}
		if got := ag.listsAfter(ev); got != tc.want {
			t.Errorf("%s of %q: lists %v, want %v", tc.action, tc.instance, got, tc.want)
		}
	}
}

// TestAgentInspectsOnlyForHealthChecks: a run is reported running at once
// with podman's return as its start time; only a workload with a health
// check (which tells runs apart by their exact start) costs an inspect, and
// the next listing brings the exact start time either way.
func TestAgentInspectsOnlyForHealthChecks(t *testing.T) {
	t.Parallel()
	for _, hc := range []bool{false, true} {
		t.Run(fmt.Sprintf("health check %v", hc), func(t *testing.T) {
			t.Parallel()
			e := newAgentEnv(t)
			exact := time.Now().Add(-time.Hour).Truncate(time.Second)
			e.rt.now = func() time.Time { return exact } // podman's own clock, told apart from the agent's
			e.rt.mu.Lock()
			e.rt.listBlock = make(chan struct{}) // no listing until the run is reported
			e.rt.mu.Unlock()
			e.assign("web-1", quadlet.RestartAlways, "httpd -f", hc)
			before := time.Now()
			ag, _ := e.start()
			got := e.waitFor("web-1 running", ag, func(m map[string]api.InstanceStatus) bool {
				// With listings held, only an inspect tells the exact start.
				return m["web-1"].Phase == api.InstanceRunning && (!hc || m["web-1"].StartedAt.Equal(exact))
			})["web-1"]
			e.rt.mu.Lock()
			inspects := e.rt.inspects
			close(e.rt.listBlock)
			e.rt.mu.Unlock()
			if hc {
				if inspects == 0 || !got.StartedAt.Equal(exact) {
					t.Errorf("with a health check: %d inspects, started %v; want an inspect and the exact start %v", inspects, got.StartedAt, exact)
				}
			} else {
				if inspects != 0 || got.StartedAt.Before(before) {
					t.Errorf("without a health check: %d inspects, started %v; want none and the time podman returned (after %v)", inspects, got.StartedAt, before)
				}
			}
			e.waitFor("the listing's exact start time", ag, func(m map[string]api.InstanceStatus) bool {
				return m["web-1"].StartedAt.Equal(exact)
			})
		})
	}
}

// TestAgentStopsZombiesOnReturn: an instance whose assignment the leader
// deleted while the node was away (lost, its instances replaced
// elsewhere) is stopped and removed by the agent when the node comes back,
// while an instance still assigned is adopted and keeps running. A
// container the agent finds "stopping" (an agent stopped or killed in the
// middle of its removal) is stopped before it is removed: Podman 4.3's rm
// removes it without stopping it, and its processes would run on.
func TestAgentStopsZombiesOnReturn(t *testing.T) {
	t.Parallel()
	for _, cutShort := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop cut short %v", cutShort), func(t *testing.T) {
			t.Parallel()
			e := newAgentEnv(t)
			gone := e.assign("web-1", quadlet.RestartAlways, "sleep 1000", false)
			e.assign("web-2", quadlet.RestartAlways, "sleep 1000", false)
			ag, stop := e.start()
			got := e.waitFor("both running", ag, func(m map[string]api.InstanceStatus) bool {
				return m["web-1"].Phase == api.InstanceRunning && m["web-2"].Phase == api.InstanceRunning
			})
			stop()
			if c := e.rt.byInstance()["web-1"]; c.State != runtime.StateRunning {
				t.Fatalf("stopping the agent left web-1 %s", c.State)
			}
			if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{gone}); err != nil {
				t.Fatal(err)
			}
			zombie := got["web-1"].ContainerID
			if cutShort {
				e.rt.stopping(zombie)
			}
			ag2, _ := e.start()
			polltest.Until(t, 10*time.Second, "the replaced instance's container removed", func() bool {
				_, ok := e.rt.byInstance()["web-1"]
				return !ok
			})
			got2 := e.waitFor("web-2 adopted", ag2, func(m map[string]api.InstanceStatus) bool {
				return m["web-2"].Phase == api.InstanceRunning
			})
			if got2["web-2"].ContainerID != got["web-2"].ContainerID {
				t.Errorf("web-2 container %s after the return, want the adopted %s", got2["web-2"].ContainerID, got["web-2"].ContainerID)
			}
			e.rt.mu.Lock()
			defer e.rt.mu.Unlock()
			if wantStops := map[bool][]string{true: {zombie}}[cutShort]; !slices.Equal(e.rt.stops, wantStops) || len(e.rt.orphaned) > 0 {
				t.Errorf("stopped %v, removed while stopping %v; want %v stopped first, none removed while stopping",
					e.rt.stops, e.rt.orphaned, wantStops)
			}
		})
	}
}

// TestAgentRemovalWithLeftoversIsDone: a removal after which the runtime
// had to kill processes of the container it left running is done (the
// container and its processes are gone), with a warning in the log, not a
// failed step retried.
func TestAgentRemovalWithLeftoversIsDone(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	logs := &testenv.SyncBuffer{}
	e.logger = zerolog.New(logs)
	gone := e.assign("web-1", quadlet.RestartAlways, "sleep 1000", false)
	ag, stop := e.start()
	e.waitFor("web-1 running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning
	})
	e.rt.mu.Lock()
	e.rt.leftovers = true
	e.rt.mu.Unlock()
	if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{gone}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "web-1's container removed", func() bool {
		_, ok := e.rt.byInstance()["web-1"]
		return !ok
	})
	stop()
	if !strings.Contains(logs.String(), "left processes of the removed container running") || strings.Contains(logs.String(), "step failed") {
		t.Errorf("log:\n%s\nwant the leftovers warned about, and no failed step", logs)
	}
}

// TestAgentStopLetsARemovalFinish: a removal under way when the agent stops
// is not cut short (a podman rm killed half way leaves the container
// "stopping"); the agent returns once it is done.
func TestAgentStopLetsARemovalFinish(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	e.rt.removeBlock, e.rt.removing = make(chan struct{}), make(chan struct{}, 1)
	gone := e.assign("web-1", quadlet.RestartAlways, "sleep 1000", false)
	ag, stop := e.start()
	e.waitFor("web-1 running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning
	})
	if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{gone}); err != nil {
		t.Fatal(err)
	}
	<-e.rt.removing // the removal is under way
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("the agent returned while its removal was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(e.rt.removeBlock)
	<-stopped
	if c, ok := e.rt.byInstance()["web-1"]; ok {
		t.Fatalf("after the stop, web-1's container is %+v, want it removed", c)
	}
}

// TestAgentRetriesANodeFailureOnceItIsGone: a create the node failed, not
// the instance, is reported NodeRetry and retried within seconds of its
// cause going away, although the instance's back-off (an hour here) would
// hold a failure of its own that long: at once when the runtime is seen to
// come back (its listings work again), and within nodeRetryCap when no
// sign tells (the node's Podman network gone, then made again behind the
// agent's back).
func TestAgentRetriesANodeFailureOnceItIsGone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		set   func(f *fakeRuntime, err error)
		cause error
	}{
		{"runtime down", func(f *fakeRuntime, err error) { f.down = err },
			fmt.Errorf("podman create: %w: dial unix /run/kat-podman/podman.sock: connect: connection refused", runtime.ErrServiceUnavailable)},
		{"network gone", func(f *fakeRuntime, err error) { f.createErr = err },
			fmt.Errorf("podman create: network kat-n1: %w", runtime.ErrNetworkNotFound)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newAgentEnv(t)
			e.restartBackoff = time.Hour
			e.rt.mu.Lock()
			tc.set(e.rt, tc.cause)
			e.rt.mu.Unlock()
			e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
			ag, _ := e.start()
			e.waitFor("the create failed, waiting on the node", ag, func(m map[string]api.InstanceStatus) bool {
				r := m["web-1"]
				return r.Phase == api.InstancePending && r.NodeRetry && strings.Contains(r.Message, tc.cause.Error())
			})
			e.rt.mu.Lock()
			tc.set(e.rt, nil)
			e.rt.mu.Unlock()
			e.waitFor("the instance running once the cause is gone", ag, func(m map[string]api.InstanceStatus) bool {
				return m["web-1"].Phase == api.InstanceRunning && !m["web-1"].NodeRetry
			})
		})
	}
}
