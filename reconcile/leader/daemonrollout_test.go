package leader

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

const (
	oldTmpl = "oldtemplate"
	newTmpl = "newtemplate"
)

var rolloutT0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// dsAssignment is an instance of DaemonService default/d on node.
func dsAssignment(id, node, tmpl string, age int) api.Assignment {
	gen := int64(1)
	if tmpl == newTmpl {
		gen = 2
	}
	return api.Assignment{InstanceID: id, Node: node, Namespace: "default", Workload: "d", Type: "DaemonService",
		TemplateHash: tmpl, Generation: gen, Files: map[string][]byte{"workload.kat": []byte(tmpl)},
		CreatedAt: rolloutT0.Add(time.Duration(age) * time.Second)}
}

var (
	dsRunning  = api.InstanceStatus{Phase: api.InstanceRunning, HealthStatus: api.HealthNotApplicable}
	dsStarting = api.InstanceStatus{Phase: api.InstancePending, HealthStatus: api.HealthPending}
)

func verified(v string) api.InstanceStatus {
	r := dsRunning
	r.Verification = v
	if v == api.VerifyFailed {
		r.VerifyMessage = "exit 1: broken"
	}
	return r
}

// oldOn3 is an old instance on each of nodes a, b and c, all running.
func oldOn3() ([]api.Assignment, map[string]api.InstanceStatus) {
	cur := []api.Assignment{dsAssignment("old-a", "a", oldTmpl, 0), dsAssignment("old-b", "b", oldTmpl, 0),
		dsAssignment("old-c", "c", oldTmpl, 0)}
	return cur, map[string]api.InstanceStatus{"old-a": dsRunning, "old-b": dsRunning, "old-c": dsRunning}
}

// rolloutRecord is a record of an update to newTmpl over a, b and c, each
// from oldTmpl, at steps.
func rolloutRecord(phase string, verify bool, steps ...string) *api.DaemonRolloutRecord {
	r := &api.DaemonRolloutRecord{
		DaemonRollout: api.DaemonRollout{Namespace: "default", Workload: "d", Phase: phase, TargetGeneration: 2,
			TargetTemplate: newTmpl, MaxParallel: 1, Verify: verify, StartedAt: rolloutT0},
		Previous: map[string]api.Assignment{oldTmpl: dsAssignment("old-a", "a", oldTmpl, 0)},
	}
	for i, st := range steps {
		n := api.DaemonRolloutNode{Node: string(rune('a' + i)), Step: st, PreviousTemplate: oldTmpl, PreviousGeneration: 1}
		if st != api.NodeStepPending {
			n.StartedAt = rolloutT0
		}
		r.Nodes = append(r.Nodes, n)
	}
	return r
}

// render is a plan as one line: the phase and each node's step, then what
// it places, restores and deletes.
func renderRollout(p daemonRolloutPlan) string {
	var b strings.Builder
	switch {
	case p.Drop:
		b.WriteString("drop ")
	case p.Rec == nil:
		b.WriteString("none ")
	default:
		b.WriteString(p.Rec.Phase)
		for _, n := range p.Rec.Nodes {
			fmt.Fprintf(&b, " %s=%s", n.Node, n.Step)
		}
		b.WriteString(" ")
	}
	if !p.Active {
		b.WriteString("(usual) ")
	}
	var restore, del []string
	for _, a := range p.Restore {
		restore = append(restore, a.Node+":"+a.TemplateHash)
	}
	for _, a := range p.Delete {
		del = append(del, a.InstanceID)
	}
	slices.Sort(del)
	fmt.Fprintf(&b, "| place %v restore %v delete %v", p.Place, restore, del)
	return b.String()
}

func TestStepDaemonRollout(t *testing.T) {
	t.Parallel()
	old, oldReports := oldOn3()
	with := func(extra ...api.Assignment) []api.Assignment { return append(slices.Clone(old), extra...) }
	reports := func(kv ...any) map[string]api.InstanceStatus {
		m := map[string]api.InstanceStatus{}
		for k, v := range oldReports {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(api.InstanceStatus)
		}
		return m
	}
	allReady := map[string]bool{"a": true, "b": true, "c": true}
	tests := []struct {
		name        string
		rec         *api.DaemonRolloutRecord
		cur         []api.Assignment
		reported    map[string]api.InstanceStatus
		maxParallel int
		verify      bool
		ready       map[string]bool
		// eligible defaults to a, b and c.
		eligible []string
		now      time.Time
		want     string
	}{
		{
			name: "a first deployment is not an update",
			cur:  []api.Assignment{dsAssignment("new-a", "a", newTmpl, 0)},
			want: "none (usual) | place [] restore [] delete []",
		},
		{
			name: "a changed template starts on the first node only",
			cur:  old, reported: oldReports,
			want: "Progressing a=updating b=pending c=pending | place [a] restore [] delete []",
		},
		{
			name: "maxParallel 2 starts two nodes", maxParallel: 2,
			cur: old, reported: oldReports,
			want: "Progressing a=updating b=updating c=pending | place [a b] restore [] delete []",
		},
		{
			name: "a pending node that is not Ready waits; the next starts",
			cur:  old, reported: oldReports, ready: map[string]bool{"b": true, "c": true},
			want: "Progressing a=pending b=updating c=pending | place [b] restore [] delete []",
		},
		{
			name: "the new instance dsStarting: nothing moves",
			rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:  with(dsAssignment("new-a", "a", newTmpl, 5)), reported: reports("new-a", dsStarting),
			want: "Progressing a=updating b=pending c=pending | place [] restore [] delete []",
		},
		{
			name: "healthy without verify: verified, its old instance goes, the next node starts",
			rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:  with(dsAssignment("new-a", "a", newTmpl, 5)), reported: reports("new-a", dsRunning),
			want: "Progressing a=verified b=updating c=pending | place [b] restore [] delete [old-a]",
		},
		{
			name: "healthy but not verified yet: the next node waits",
			rec:  rolloutRecord(api.RolloutProgressing, true, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:  with(dsAssignment("new-a", "a", newTmpl, 5)), reported: reports("new-a", verified(api.VerifyPending)),
			verify: true,
			want:   "Progressing a=updating b=pending c=pending | place [] restore [] delete []",
		},
		{
			name: "verified by its agent: the next node starts",
			rec:  rolloutRecord(api.RolloutProgressing, true, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:  with(dsAssignment("new-a", "a", newTmpl, 5)), reported: reports("new-a", verified(api.VerifyPassed)),
			verify: true,
			want:   "Progressing a=verified b=updating c=pending | place [b] restore [] delete [old-a]",
		},
		{
			name: "verification fails on the first node: its new instance goes, the others are never touched",
			rec:  rolloutRecord(api.RolloutProgressing, true, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:  with(dsAssignment("new-a", "a", newTmpl, 5)), reported: reports("new-a", verified(api.VerifyFailed)),
			verify: true,
			want:   "Failed a=rolled back b=pending c=pending | place [] restore [] delete [new-a]",
		},
		{
			name:     "a failed instance fails its node",
			rec:      rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:      with(dsAssignment("new-a", "a", newTmpl, 5)),
			reported: reports("new-a", api.InstanceStatus{Phase: api.InstanceFailed, ExitCode: 3}),
			want:     "Failed a=rolled back b=pending c=pending | place [] restore [] delete [new-a]",
		},
		{
			name: "not verified by the deadline fails the node",
			rec:  rolloutRecord(api.RolloutProgressing, true, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
			cur:  with(dsAssignment("new-a", "a", newTmpl, 5)), reported: reports("new-a", verified(api.VerifyPending)),
			verify: true, now: rolloutT0.Add(11 * time.Minute),
			want: "Failed a=rolled back b=pending c=pending | place [] restore [] delete [new-a]",
		},
		{
			name: "a failure on the second node rolls the first back: its previous instance is put back first",
			rec:  rolloutRecord(api.RolloutProgressing, true, api.NodeStepVerified, api.NodeStepUpdating, api.NodeStepPending),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("old-b", "b", oldTmpl, 0),
				dsAssignment("new-b", "b", newTmpl, 5), dsAssignment("old-c", "c", oldTmpl, 0)},
			reported: reports("new-a", verified(api.VerifyPassed), "new-b", verified(api.VerifyFailed)), verify: true,
			want: "RollingBack a=rolling back b=rolled back c=pending | place [] restore [a:oldtemplate] delete [new-b]",
		},
		{
			name: "the restored instance not ready yet: the new one stays",
			rec:  rolloutRecord(api.RolloutRollingBack, true, api.NodeStepRollingBack, api.NodeStepRolledBack, api.NodeStepPending),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("back-a", "a", oldTmpl, 9),
				dsAssignment("old-b", "b", oldTmpl, 0), dsAssignment("old-c", "c", oldTmpl, 0)},
			reported: reports("new-a", verified(api.VerifyPassed), "back-a", dsStarting), verify: true,
			want: "RollingBack a=rolling back b=rolled back c=pending | place [] restore [] delete []",
		},
		{
			name: "the restored instance ready: the new one goes and the update has failed",
			rec:  rolloutRecord(api.RolloutRollingBack, true, api.NodeStepRollingBack, api.NodeStepRolledBack, api.NodeStepPending),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("back-a", "a", oldTmpl, 9),
				dsAssignment("old-b", "b", oldTmpl, 0), dsAssignment("old-c", "c", oldTmpl, 0)},
			reported: reports("new-a", verified(api.VerifyPassed), "back-a", dsRunning), verify: true,
			want: "Failed a=rolled back b=rolled back c=pending | place [] restore [] delete [new-a]",
		},
		{
			name: "a failed update holds: nothing placed, pending nodes untouched",
			rec:  rolloutRecord(api.RolloutFailed, true, api.NodeStepRolledBack, api.NodeStepPending, api.NodeStepPending),
			cur:  old, reported: oldReports, verify: true,
			want: "Failed a=rolled back b=pending c=pending | place [] restore [] delete []",
		},
		{
			name: "a leader that finds a node updating without its instance places it",
			rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepVerified, api.NodeStepUpdating, api.NodeStepPending),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("old-b", "b", oldTmpl, 0),
				dsAssignment("old-c", "c", oldTmpl, 0)},
			reported: reports("new-a", dsRunning),
			want:     "Progressing a=verified b=updating c=pending | place [b] restore [] delete []",
		},
		{
			name: "a leader that finds a pending node's new instance carries on from it",
			rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepVerified, api.NodeStepPending, api.NodeStepPending),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("old-b", "b", oldTmpl, 0),
				dsAssignment("new-b", "b", newTmpl, 6), dsAssignment("old-c", "c", oldTmpl, 0)},
			reported: reports("new-a", dsRunning, "new-b", dsRunning),
			want:     "Progressing a=verified b=verified c=updating | place [c] restore [] delete [old-b]",
		},
		{
			name: "every node verified: complete",
			rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepVerified, api.NodeStepVerified, api.NodeStepUpdating),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("new-b", "b", newTmpl, 5),
				dsAssignment("old-c", "c", oldTmpl, 0), dsAssignment("new-c", "c", newTmpl, 5)},
			reported: reports("new-a", dsRunning, "new-b", dsRunning, "new-c", dsRunning),
			want:     "Complete a=verified b=verified c=verified | place [] restore [] delete [old-c]",
		},
		{
			name: "a complete update leaves the DaemonService to the usual rules",
			rec:  rolloutRecord(api.RolloutComplete, false, api.NodeStepVerified, api.NodeStepVerified, api.NodeStepVerified),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("new-b", "b", newTmpl, 5),
				dsAssignment("new-c", "c", newTmpl, 5)},
			want: "Complete a=verified b=verified c=verified (usual) | place [] restore [] delete []",
		},
		{
			name: "a node no longer eligible loses its instances and leaves the update",
			rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepVerified, api.NodeStepUpdating, api.NodeStepPending),
			cur: []api.Assignment{dsAssignment("new-a", "a", newTmpl, 5), dsAssignment("old-b", "b", oldTmpl, 0),
				dsAssignment("new-b", "b", newTmpl, 5), dsAssignment("old-c", "c", oldTmpl, 0)},
			reported: reports("new-a", dsRunning, "new-b", dsStarting), eligible: []string{"a", "c"},
			want: "Progressing a=verified c=updating | place [c] restore [] delete [new-b old-b]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ready := tc.ready
			if ready == nil {
				ready = allReady
			}
			eligible := tc.eligible
			if eligible == nil {
				eligible = []string{"a", "b", "c"}
			}
			now := tc.now
			if now.IsZero() {
				now = rolloutT0.Add(time.Minute)
			}
			got := stepDaemonRollout(daemonRolloutInput{
				Namespace: "default", Workload: "d", Rec: tc.rec,
				Target:   daemonTarget{Template: newTmpl, Generation: 2, MaxParallel: max(tc.maxParallel, 1), Verify: tc.verify},
				Eligible: eligible, Ready: ready, Current: tc.cur, Reported: tc.reported,
				Deadline: DefaultDaemonNodeDeadline, Now: now,
			})
			if s := renderRollout(got); s != tc.want {
				t.Errorf("step:\n got %s\nwant %s", s, tc.want)
			}
		})
	}
}

// simulateRollout runs stepDaemonRollout over nodes a to e, each running
// an old instance, until it settles. Each pass reads the record back from
// its JSON, as a new leader reads it from etcd; the agents report every
// instance running at once, and a new one on a node in failOn failing its
// verify command. It returns the record, the assignments, the nodes in the
// order they started, the most nodes updating at once, and each node's
// assignments at every pass.
func simulateRollout(t *testing.T, maxParallel int, failOn map[string]bool) (*api.DaemonRolloutRecord, []api.Assignment, []string, int, map[string][]string) {
	t.Helper()
	nodes := []string{"a", "b", "c", "d", "e"}
	var cur []api.Assignment
	for _, n := range nodes {
		cur = append(cur, dsAssignment("old-"+n, n, oldTmpl, 0))
	}
	var rec *api.DaemonRolloutRecord
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n] = true
	}
	var order []string
	most, seq := 0, 0
	history := map[string][]string{}
	now := rolloutT0
	for pass := 0; pass < 60; pass++ {
		now = now.Add(time.Second)
		reported := map[string]api.InstanceStatus{}
		for _, a := range cur {
			r := verified(api.VerifyPassed)
			if a.TemplateHash == newTmpl && failOn[a.Node] {
				r = verified(api.VerifyFailed)
			}
			reported[a.InstanceID] = r
		}
		var stored *api.DaemonRolloutRecord
		if rec != nil {
			b, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}
			stored = &api.DaemonRolloutRecord{}
			if err := json.Unmarshal(b, stored); err != nil {
				t.Fatal(err)
			}
		}
		p := stepDaemonRollout(daemonRolloutInput{
			Namespace: "default", Workload: "d", Rec: stored,
			Target:   daemonTarget{Template: newTmpl, Generation: 2, MaxParallel: maxParallel, Verify: true},
			Eligible: nodes, Ready: ready, Current: slices.Clone(cur), Reported: reported,
			Deadline: DefaultDaemonNodeDeadline, Now: now,
		})
		if p.Rec != nil {
			rec = p.Rec
			updating := 0
			for _, n := range rec.Nodes {
				if n.Step == api.NodeStepUpdating {
					updating++
				}
			}
			most = max(most, updating)
		}
		order = append(order, p.Place...)
		for _, n := range p.Place {
			seq++
			cur = append(cur, dsAssignment(fmt.Sprintf("new-%s-%d", n, seq), n, newTmpl, pass))
		}
		for _, a := range p.Restore {
			seq++
			cur = append(cur, dsAssignment(fmt.Sprintf("back-%s-%d", a.Node, seq), a.Node, a.TemplateHash, pass))
		}
		cur = slices.DeleteFunc(cur, func(a api.Assignment) bool {
			return slices.ContainsFunc(p.Delete, func(d api.Assignment) bool { return d.InstanceID == a.InstanceID })
		})
		for _, n := range nodes {
			var ids []string
			for _, a := range cur {
				if a.Node == n {
					ids = append(ids, a.InstanceID)
				}
			}
			history[n] = append(history[n], strings.Join(ids, ","))
		}
		if !p.Changed && len(p.Place)+len(p.Restore)+len(p.Delete) == 0 {
			return rec, cur, order, most, history
		}
	}
	t.Fatalf("the update did not settle in 60 passes: %s", renderRollout(daemonRolloutPlan{Rec: rec, Active: true}))
	return nil, nil, nil, 0, nil
}

func onNodes(cur []api.Assignment) string {
	var s []string
	for _, a := range cur {
		s = append(s, a.Node+":"+a.TemplateHash)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}

func TestDaemonRolloutScenarios(t *testing.T) {
	t.Parallel()
	t.Run("one node at a time, in order, every pass a new leader", func(t *testing.T) {
		rec, cur, order, most, _ := simulateRollout(t, 1, nil)
		if rec.Phase != api.RolloutComplete || fmt.Sprint(order) != "[a b c d e]" || most != 1 {
			t.Errorf("phase %s, order %v, at most %d updating; want Complete, [a b c d e], 1", rec.Phase, order, most)
		}
		if got := onNodes(cur); got != "a:newtemplate b:newtemplate c:newtemplate d:newtemplate e:newtemplate" {
			t.Errorf("instances %s, want the new template once on every node", got)
		}
	})
	t.Run("maxParallel 2 updates two nodes at a time", func(t *testing.T) {
		rec, _, order, most, _ := simulateRollout(t, 2, nil)
		if rec.Phase != api.RolloutComplete || fmt.Sprint(order) != "[a b c d e]" || most != 2 {
			t.Errorf("phase %s, order %v, at most %d updating; want Complete, [a b c d e], 2", rec.Phase, order, most)
		}
	})
	t.Run("a failure on the third node rolls back the two before and never touches the last two", func(t *testing.T) {
		rec, cur, order, _, history := simulateRollout(t, 1, map[string]bool{"c": true})
		if rec.Phase != api.RolloutFailed || fmt.Sprint(order) != "[a b c]" {
			t.Errorf("phase %s, order %v; want Failed, [a b c]", rec.Phase, order)
		}
		want := "a=rolled back b=rolled back c=rolled back d=pending e=pending"
		var got []string
		for _, n := range rec.Nodes {
			got = append(got, n.Node+"="+n.Step)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("steps %s, want %s", strings.Join(got, " "), want)
		}
		if !strings.Contains(rec.Nodes[2].Message, "verify command") || !strings.Contains(rec.Message, "c: failed") {
			t.Errorf("node c's message %q, the update's %q: want the verification failure named", rec.Nodes[2].Message, rec.Message)
		}
		if got := onNodes(cur); got != "a:oldtemplate b:oldtemplate c:oldtemplate d:oldtemplate e:oldtemplate" {
			t.Errorf("instances %s, want the old template once on every node", got)
		}
		for _, n := range []string{"d", "e"} {
			for i, ids := range history[n] {
				if ids != "old-"+n {
					t.Fatalf("node %s ran %s after pass %d, want only old-%s throughout", n, ids, i, n)
				}
			}
		}
		if history["c"][len(history["c"])-1] != "old-c" {
			t.Errorf("node c ends with %s, want its old instance, never stopped", history["c"][len(history["c"])-1])
		}
	})
}

// TestStepDaemonRolloutStopFirst: a DaemonService that publishes host ports
// never has two instances on one node: the old one leaves before the new
// one is placed, and in a rollback the target leaves before the previous
// one is restored. Placed beside the old one, the new instance could not
// bind the ports.
func TestStepDaemonRolloutStopFirst(t *testing.T) {
	t.Parallel()
	old, oldReports := oldOn3()
	allReady := map[string]bool{"a": true, "b": true, "c": true}
	failed := api.InstanceStatus{Phase: api.InstanceFailed, ExitCode: 1, Message: "bind :80"}
	for _, tc := range []struct {
		name     string
		rec      *api.DaemonRolloutRecord
		cur      []api.Assignment
		leaving  map[string]bool
		reported map[string]api.InstanceStatus
		want     string
	}{{
		name: "a changed template stops the first node's old instance, placing nothing",
		cur:  old, reported: oldReports,
		want: "Progressing a=updating b=pending c=pending | place [] restore [] delete [old-a]",
	}, {
		name: "the new instance waits while the old one is leaving",
		rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
		cur:  old[1:], leaving: map[string]bool{"a": true}, reported: oldReports,
		want: "Progressing a=updating b=pending c=pending | place [] restore [] delete []",
	}, {
		name: "once the old instance is gone the new one is placed",
		rec:  rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
		cur:  old[1:], reported: oldReports,
		want: "Progressing a=updating b=pending c=pending | place [a] restore [] delete []",
	}, {
		name:     "a verified node's successor stops its old instance first",
		rec:      rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
		cur:      append(slices.Clone(old[1:]), dsAssignment("new-a", "a", newTmpl, 5)),
		reported: map[string]api.InstanceStatus{"new-a": dsRunning, "old-b": dsRunning, "old-c": dsRunning},
		want:     "Progressing a=verified b=updating c=pending | place [] restore [] delete [old-b]",
	}, {
		name:     "a rollback stops the target before the previous instance is restored",
		rec:      rolloutRecord(api.RolloutProgressing, false, api.NodeStepUpdating, api.NodeStepPending, api.NodeStepPending),
		cur:      append(slices.Clone(old[1:]), dsAssignment("new-a", "a", newTmpl, 5)),
		reported: map[string]api.InstanceStatus{"new-a": failed, "old-b": dsRunning, "old-c": dsRunning},
		want:     "RollingBack a=failed b=pending c=pending | place [] restore [] delete [new-a]",
	}, {
		name: "with the target gone the previous instance is restored",
		rec:  rolloutRecord(api.RolloutRollingBack, false, api.NodeStepRollingBack, api.NodeStepPending, api.NodeStepPending),
		cur:  old[1:], reported: oldReports,
		want: "RollingBack a=rolling back b=pending c=pending | place [] restore [a:oldtemplate] delete []",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := stepDaemonRollout(daemonRolloutInput{
				Namespace: "default", Workload: "d", Rec: tc.rec,
				Target:   daemonTarget{Template: newTmpl, Generation: 2, MaxParallel: 1, StopFirst: true},
				Eligible: []string{"a", "b", "c"}, Ready: allReady, Current: tc.cur, Leaving: tc.leaving,
				Reported: tc.reported, Deadline: DefaultDaemonNodeDeadline, Now: rolloutT0.Add(time.Minute),
			})
			if s := renderRollout(got); s != tc.want {
				t.Errorf("step:\n got %s\nwant %s", s, tc.want)
			}
		})
	}
}
