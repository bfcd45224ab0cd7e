package agent

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

func TestOwnershipOf(t *testing.T) {
	t.Parallel()
	labels := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	const managed, node, cluster = runtime.LabelManaged, runtime.LabelNode, runtime.LabelCluster
	tests := []struct {
		name   string
		labels map[string]string
		want   ownership
	}{
		{name: "this cluster and node", labels: labels(managed, "true", node, "n1", cluster, "c1"), want: ownedHere},
		{name: "another cluster", labels: labels(managed, "true", node, "n1", cluster, "c2"), want: otherCluster},
		{name: "no cluster label", labels: labels(managed, "true", node, "n1"), want: unlabelled},
		{name: "empty cluster label", labels: labels(managed, "true", node, "n1", cluster, ""), want: unlabelled},
		{name: "another node", labels: labels(managed, "true", node, "n2", cluster, "c1"), want: otherNode},
		{name: "no node label", labels: labels(managed, "true", cluster, "c1"), want: otherNode},
		{name: "not managed", labels: labels(node, "n1", cluster, "c1"), want: notManaged},
		{name: "managed false", labels: labels(managed, "false", node, "n1", cluster, "c1"), want: notManaged},
		{name: "no labels", want: notManaged},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ownershipOf(tc.labels, "c1", "n1"); got != tc.want {
				t.Errorf("ownershipOf(%v) = %d, want %d", tc.labels, got, tc.want)
			}
		})
	}
}

func TestNewAgentRequiresClusterUID(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	_, err := NewAgent(AgentConfig{Repo: e.repo, Node: "n1", Runtime: e.rt,
		BuildSpec: func(api.Assignment, *quadlet.Quadlet, SpecInputs) (runtime.ContainerSpec, error) {
			return runtime.ContainerSpec{}, nil
		}})
	if err == nil || !strings.Contains(err.Error(), "cluster UID is required") {
		t.Fatalf("NewAgent without a cluster UID: %v, want an error saying it is required", err)
	}
}

// TestAgentManagesOnlyItsOwnContainers: among containers on its node, the
// agent removes its own orphan, but never stops, removes or adopts another
// cluster's (even one labelled with an instance assigned to it), one
// without a cluster label (from before the label), another node's or one
// made by hand, nor one of an instance it is told to leave (Leave: a
// detached plane's agent and the cluster's Job instances); it logs each
// it leaves alone for the operator, once. It holds when the runtime
// ignores the label filter too: the agent checks every listed container
// itself.
func TestAgentManagesOnlyItsOwnContainers(t *testing.T) {
	t.Parallel()
	for _, ignoreFilters := range []bool{false, true} {
		name := "runtime filters"
		if ignoreFilters {
			name = "runtime ignores filters"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testAgentManagesOnlyItsOwnContainers(t, ignoreFilters)
		})
	}
}

func testAgentManagesOnlyItsOwnContainers(t *testing.T, ignoreFilters bool) {
	t.Helper()
	e := newAgentEnv(t)
	var logs bytes.Buffer // read once the agent has stopped
	e.logger = zerolog.New(zerolog.SyncWriter(&logs))
	e.rt.ignoreFilters = ignoreFilters
	kat := func(node, cluster, instance string) map[string]string {
		l := map[string]string{runtime.LabelManaged: "true", runtime.LabelNode: node, runtime.LabelInstance: instance,
			runtime.LabelStopGrace: "3"}
		if cluster != "" {
			l[runtime.LabelCluster] = cluster
		}
		return l
	}
	orphan := e.rt.add("kat_orphan-1", kat("n1", testCluster, "orphan-1"))
	e.leave = func(id string) bool { return id == "job-1" }
	foreign := map[string]string{ // what each left alone is
		e.rt.add("kat_job-1", kat("n1", testCluster, "job-1")):                   "one it is told to leave (Leave)",
		e.rt.add("other_web-1", kat("n1", "cluster-uid-2", "web-1")):             "another cluster's, of an assigned instance",
		e.rt.add("other_gone-1", kat("n1", "cluster-uid-2", "gone-1")):           "another cluster's",
		e.rt.add("old_legacy-1", kat("n1", "", "legacy-1")):                      "one without a cluster label",
		e.rt.add("n2_x-1", kat("n2", testCluster, "x-1")):                        "another node's",
		e.rt.add("hand-1", map[string]string{runtime.LabelNode: "n1", "a": "b"}): "one made by hand",
	}
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	ag, stop := e.start()
	got := e.waitFor("web-1 running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning
	})
	if _, adopted := foreign[got["web-1"].ContainerID]; adopted {
		t.Fatalf("web-1 adopted container %s, %s", got["web-1"].ContainerID, foreign[got["web-1"].ContainerID])
	}
	polltest.Until(t, 10*time.Second, "the agent's own orphan removed", func() bool {
		e.rt.mu.Lock()
		defer e.rt.mu.Unlock()
		_, there := e.rt.c[orphan]
		return !there
	})
	// A few more resyncs, then stop: every step the agent started has
	// ended when stop returns.
	e.rt.mu.Lock()
	lists := e.rt.lists
	e.rt.mu.Unlock()
	polltest.Until(t, 10*time.Second, "two more listings", func() bool {
		e.rt.mu.Lock()
		defer e.rt.mu.Unlock()
		return e.rt.lists >= lists+2
	})
	stop()

	e.rt.mu.Lock()
	defer e.rt.mu.Unlock()
	for id, what := range foreign {
		c, there := e.rt.c[id]
		if !there || c.State != runtime.StateRunning {
			t.Errorf("%s (%s) was stopped or removed", what, id)
		}
	}
	if len(e.rt.graces) != 1 {
		t.Errorf("%d removals, want 1 (the orphan's)", len(e.rt.graces))
	}
	if c := e.rt.c[got["web-1"].ContainerID]; c == nil || c.Labels[runtime.LabelCluster] != testCluster {
		t.Errorf("web-1's container has no %s=%s label: %+v", runtime.LabelCluster, testCluster, c)
	}
	own := map[string]string{runtime.LabelNode: "n1", runtime.LabelCluster: testCluster}
	for _, f := range e.rt.eventFilters {
		if !maps.Equal(f, own) {
			t.Errorf("events filtered on %v, want %v", f, own)
		}
	}
	survey := 0
	for _, f := range e.rt.listFilters {
		switch {
		case maps.Equal(f, own):
		case maps.Equal(f, map[string]string{runtime.LabelNode: "n1"}):
			survey++ // the one listing that finds what to report
		default:
			t.Errorf("listing filtered on %v, want %v", f, own)
		}
	}
	if survey != 1 {
		t.Errorf("%d listings of the node's containers of any cluster, want 1 (at start)", survey)
	}

	leftAlone := func(container string) []string { // the log lines saying container is left alone
		var lines []string
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, `"container":"`+container+`"`) && strings.Contains(l, "left alone") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	for _, tc := range []struct {
		container, want string
	}{
		{container: "other_web-1", want: "container of another cluster"},
		{container: "other_gone-1", want: "container of another cluster"},
		{container: "old_legacy-1", want: "remove it by hand"},
	} {
		if lines := leftAlone(tc.container); len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
			t.Errorf("log lines about %s: %q, want one saying %q", tc.container, lines, tc.want)
		}
	}
	for _, quiet := range []string{"n2_x-1", "hand-1", "kat_orphan-1", "kat_web-1", "kat_job-1"} {
		if lines := leftAlone(quiet); len(lines) != 0 {
			t.Errorf("logged %s as left alone: %q", quiet, lines)
		}
	}
}

// TestAgentSaysWhoHoldsTheName: a container the agent does not manage that
// holds an assigned instance's container name (one from before the cluster
// label) keeps the instance from being created; the agent leaves it alone
// and the instance's message says what to do.
func TestAgentSaysWhoHoldsTheName(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t)
	old := e.rt.add("kat_web-1", map[string]string{runtime.LabelManaged: "true", runtime.LabelNode: "n1",
		runtime.LabelInstance: "web-1"})
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	ag, _ := e.start()
	e.waitFor("the create refused with the reason", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstancePending && strings.Contains(m["web-1"].Message, "does not manage") &&
			strings.Contains(m["web-1"].Message, "remove it by hand")
	})
	if c := e.rt.byInstance()["web-1"]; c.ID != old || c.State != runtime.StateRunning {
		t.Fatalf("the old container was touched: %+v", c)
	}
}
