package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
	"kat.dws.rip/kat/webhook"
)

// leaderEnv is a real etcd with the namespace ns1, where terms of leader
// loops run.
type leaderEnv struct {
	t    *testing.T
	repo *resources.Repo
	ctx  context.Context
	// base is the Unix time report's timestamps count from.
	base int64
}

func newLeaderEnv(t *testing.T) *leaderEnv {
	t.Helper()
	repo := resources.New(storetest.New(t))
	if _, err := repo.EnsureNamespace(t.Context(), "ns1", nil); err != nil {
		t.Fatal(err)
	}
	e := &leaderEnv{t: t, repo: repo, ctx: t.Context(), base: time.Now().Unix()}
	e.register("n1", nil)
	e.report(0)
	return e
}

// register registers node name with labels.
func (e *leaderEnv) register(name string, labels map[string]string) {
	e.t.Helper()
	if err := e.repo.PutNodeRegistration(e.ctx, api.NodeRegistration{Name: name, UID: "uid-" + name, Labels: labels}); err != nil {
		e.t.Fatal(err)
	}
}

// run starts one term of leader loops (as reconcile.Leadership would) and
// returns it with a function that ends the term and waits for every loop.
func (e *leaderEnv) run(cfg Config) (*Leader, func()) {
	e.t.Helper()
	cfg.Repo = e.repo
	if cfg.NewSuffix == nil {
		var mu sync.Mutex
		n := 0
		cfg.NewSuffix = func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("s%d", n)
		}
	}
	l, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for _, lp := range l.Loops() {
		wg.Go(func() {
			if err := lp.Run(ctx); err != nil {
				e.t.Errorf("loop %s: %v", lp.Name, err)
			}
		})
	}
	return l, func() { cancel(); wg.Wait() }
}

func (e *leaderEnv) apply(files map[string][]byte, owner api.Owner) {
	e.t.Helper()
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.repo.ApplyWorkload(e.ctx, resources.ApplyRequest{Quadlet: q, Owner: owner}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *leaderEnv) assignments(workload string) []api.Assignment {
	e.t.Helper()
	as, err := e.repo.ListAssignments(e.ctx, "")
	if err != nil {
		e.t.Fatal(err)
	}
	var out []api.Assignment
	for _, a := range as {
		if a.Workload == workload {
			out = append(out, a)
		}
	}
	return out
}

func (e *leaderEnv) status(name string) api.WorkloadStatus {
	e.t.Helper()
	w, err := e.repo.GetWorkload(e.ctx, "ns1", name)
	if err != nil {
		e.t.Fatal(err)
	}
	return w.Status
}

// report writes node n1's status, ts seconds after the env was made, with
// the given instance reports.
func (e *leaderEnv) report(ts int64, is ...api.InstanceStatus) {
	e.t.Helper()
	if err := e.repo.PutNodeStatus(e.ctx, api.NodeStatus{NodeName: "n1", Timestamp: e.base + ts, WorkloadInstances: is}); err != nil {
		e.t.Fatal(err)
	}
}

func running(a api.Assignment) api.InstanceStatus {
	return api.InstanceStatus{InstanceID: a.InstanceID, Namespace: a.Namespace, WorkloadName: a.Workload,
		Phase: api.InstanceRunning, State: "running", HealthStatus: api.HealthNotApplicable}
}

// TestLeaderPlacesAndDerivesStatus: placement assigns a new workload's
// instances, the status loop derives Ready from the agents' reports, and a
// new term started after changes made while no leader ran (a workload
// scaled, another added) converges from etcd with nothing lost.
func TestLeaderPlacesAndDerivesStatus(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 2, "v1"), api.APIOwner())
	_, stop := e.run(Config{})
	polltest.Until(t, 10*time.Second, "two instances of web placed", func() bool { return len(e.assignments("web")) == 2 })
	as := e.assignments("web")
	polltest.Until(t, 10*time.Second, "web Progressing", func() bool {
		st := e.status("web")
		return st.Phase == api.PhasePending && st.Desired == 2 && st.ObservedGeneration == 1
	})
	e.report(1, running(as[0]), running(as[1]))
	polltest.Until(t, 10*time.Second, "web Ready", func() bool {
		st := e.status("web")
		c := condition(st, ConditionReady)
		return st.Phase == api.PhaseReady && st.Ready == 2 && st.AppliedGeneration == 1 && c != nil && c.Status == api.ConditionTrue
	})
	stop()

	// Leadership lost: desired state changes while no leader runs.
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 3, "v1"), api.APIOwner())
	e.apply(workloadFiles(t, "api", quadlet.TypeService, 1, "v1"), api.APIOwner())
	if n := len(e.assignments("web")) + len(e.assignments("api")); n != 2 {
		t.Fatalf("%d assignments written while no leader ran", n)
	}
	// A new term picks every change up from etcd.
	_, stop = e.run(Config{})
	defer stop()
	polltest.Until(t, 10*time.Second, "the new term places the changes", func() bool {
		return len(e.assignments("web")) == 3 && len(e.assignments("api")) == 1
	})
	polltest.Until(t, 10*time.Second, "web back to Progressing with 3 desired", func() bool {
		st := e.status("web")
		return st.Desired == 3 && st.Ready == 2 && st.Phase == api.PhaseProgressing
	})
}

// TestHeartbeatsWithoutChangeWakeNoPass: a node that reports the same
// instances again (only the timestamp moves) wakes neither placement nor
// status, and no spec is parsed twice.
func TestHeartbeatsWithoutChangeWakeNoPass(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	for _, n := range []string{"a", "b", "c"} {
		e.apply(workloadFiles(t, n, quadlet.TypeService, 1, "v1"), api.APIOwner())
	}
	l, stop := e.run(Config{})
	defer stop()
	polltest.Until(t, 10*time.Second, "three instances placed", func() bool {
		return len(e.assignments("a"))+len(e.assignments("b"))+len(e.assignments("c")) == 3
	})
	var reps []api.InstanceStatus
	for _, n := range []string{"a", "b", "c"} {
		reps = append(reps, running(e.assignments(n)[0]))
	}
	e.report(1, reps...)
	polltest.Until(t, 10*time.Second, "all ready", func() bool {
		return e.status("a").Phase == api.PhaseReady && e.status("b").Phase == api.PhaseReady &&
			e.status("c").Phase == api.PhaseReady
	})
	// Let the loops settle: no pass for a while.
	settled := func() (int64, int64) {
		var p, s int64
		polltest.Until(t, 10*time.Second, "the loops settle", func() bool {
			p0, s0 := l.placementPasses.Load(), l.statusPasses.Load()
			if !l.idle() {
				return false
			}
			time.Sleep(100 * time.Millisecond) //nolint:forbidigo // a quiet period is what is measured
			p, s = l.placementPasses.Load(), l.statusPasses.Load()
			return p == p0 && s == s0 && l.idle()
		})
		return p, s
	}
	p0, s0 := settled()
	parses, scans := l.view.specs.parseCount(), l.lossScans.Load()
	for ts := int64(2); ts < 22; ts++ {
		e.report(ts, reps...)
	}
	p1, s1 := settled()
	if p1 != p0 || s1 != s0 {
		t.Errorf("20 unchanged heartbeats woke %d placement and %d status passes, want none", p1-p0, s1-s0)
	}
	// Nor does the node-loss clock look at every node on each of them:
	// its next wake-up is the node's loss, a minute away.
	if n := l.lossScans.Load() - scans; n != 0 {
		t.Errorf("20 heartbeats of a Ready node made the node-loss clock look at every node %d times, want none", n)
	}
	// A changed instance does wake them. (Its back-off held, the failed
	// instance stays to be seen: replace_test.go covers its replacement.)
	e.holdReplacement(l, "a")
	p1, _ = settled()
	reps[0].Phase, reps[0].State = api.InstanceFailed, "exited"
	e.report(30, reps...)
	polltest.Until(t, 10*time.Second, "a failed instance shows", func() bool { return e.status("a").Phase == api.PhaseFailed })
	if p2, _ := settled(); p2 == p1 {
		t.Error("a changed instance state woke no placement pass")
	}
	if n := l.view.specs.parseCount(); n != parses || n != 3 {
		t.Errorf("%d parses for 3 spec hashes (%d before the heartbeats): a spec was parsed again", n, parses)
	}
}

// TestLoopsWorkOnWhatChanged: once the loops settled over 40 workloads, a
// new generation of one, its instance's report and the deletion of another
// each make placement plan and the status loop derive that workload only,
// and the others' statuses are not written again.
func TestLoopsWorkOnWhatChanged(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	const n = 40
	for i := range n {
		e.apply(workloadFiles(t, fmt.Sprintf("w%02d", i), quadlet.TypeService, 1, "v1"), api.APIOwner())
	}
	// No periodic pass over every workload while the steps run: on a
	// busy machine the test outlasts DefaultResync, and a resync plans
	// every workload by design; nor a pass for n1 lost, whose heartbeats
	// (from the test's start) would go stale after the default 60 s.
	l, stop := e.run(Config{Resync: time.Hour, NodeLossTimeout: time.Hour})
	defer stop()
	statusVersions := func() map[string]int64 {
		kvs, err := e.repo.Store().List(e.ctx, resources.StatusPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, kv := range kvs {
			out[kv.Key] = kv.Version
		}
		return out
	}
	polltest.Until(t, 10*time.Second, "every workload placed and observed", func() bool {
		as, _ := e.repo.ListAssignments(e.ctx, "")
		return len(as) == n && len(statusVersions()) == n
	})
	settle := func() {
		t.Helper()
		polltest.Until(t, 10*time.Second, "the loops settle", func() bool {
			p0, s0 := l.placementPasses.Load(), l.statusPasses.Load()
			if !l.idle() {
				return false
			}
			time.Sleep(100 * time.Millisecond) //nolint:forbidigo // a quiet period is what is measured
			return l.placementPasses.Load() == p0 && l.statusPasses.Load() == s0 && l.idle()
		})
	}
	steps := []struct {
		name   string
		change func()
		done   func() bool
		key    string
	}{
		{"a new generation of w07", func() {
			e.apply(workloadFiles(t, "w07", quadlet.TypeService, 2, "v1"), api.APIOwner())
		}, func() bool { return e.status("w07").Desired == 2 && len(e.assignments("w07")) == 2 }, "w07"},
		{"w12's instance runs", func() {
			e.report(1, running(e.assignments("w12")[0]))
		}, func() bool { return e.status("w12").Phase == api.PhaseReady }, "w12"},
		{"w30 deleted", func() {
			if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "w30"}); err != nil {
				t.Fatal(err)
			}
		}, func() bool { return len(e.assignments("w30")) == 0 }, "w30"},
	}
	for _, st := range steps {
		settle()
		before := statusVersions()
		planned, derived := l.planned.Load(), l.derived.Load()
		st.change()
		polltest.Until(t, 10*time.Second, st.name, st.done)
		settle()
		if p, d := l.planned.Load()-planned, l.derived.Load()-derived; p > 3 || d > 3 {
			t.Errorf("%s: placement planned %d workloads and the status loop derived %d, want only the changed one", st.name, p, d)
		}
		for k, v := range statusVersions() {
			if v != before[k] && k != resources.StatusKey("ns1", st.key) {
				t.Errorf("%s: the status %s was written again", st.name, k)
			}
		}
	}
}

// TestStatusPassWritesInChunks: a pass over more workloads than
// statusChunk writes every status, the last chunk's too, and each once.
func TestStatusPassWritesInChunks(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	n := 2*statusChunk + 7
	reqs := make([]resources.ApplyRequest, n)
	for i := range n {
		q, err := quadlet.ParseWorkload(workloadFiles(t, fmt.Sprintf("w%04d", i), quadlet.TypeService, 0, "v1"), quadlet.ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		reqs[i] = resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner()}
	}
	outs, err := e.repo.ApplyWorkloads(e.ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Err != nil {
			t.Fatalf("apply %d: %v", i, o.Err)
		}
	}
	_, rev, err := e.repo.Store().ListWithRevision(e.ctx, resources.StatusPrefix())
	if err != nil {
		t.Fatal(err)
	}
	events, err := e.repo.Store().Watch(e.ctx, resources.StatusPrefix(), rev+1)
	if err != nil {
		t.Fatal(err)
	}
	l, stop := e.run(Config{Resync: time.Hour, NodeLossTimeout: time.Hour})
	defer stop()
	writes := map[string]int{}
	for len(writes) < n {
		select {
		case ev := <-events:
			writes[ev.KV.Key]++
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d statuses written", len(writes), n)
		}
	}
	polltest.Until(t, time.Minute, "the loops idle", l.idle) // 1,007 workloads through every loop, under -race
	for more := true; more; {
		select {
		case ev := <-events:
			writes[ev.KV.Key]++
		default:
			more = false
		}
	}
	for k, w := range writes {
		if w != 1 {
			t.Errorf("%s written %d times, want once", k, w)
		}
	}
	if st := e.status(fmt.Sprintf("w%04d", n-1)); st.Phase != api.PhaseReady || st.Desired != 0 {
		t.Errorf("the last workload's status: %+v, want Ready with 0 desired", st)
	}
}

// TestAppSourcesLoop: a Git workload's ref is resolved and recorded; a failed
// resolution shows as SourceResolved=False on the workload (derived by the
// status loop) and goes once it resolves; a matching webhook brings the new
// commit at once (the poll interval is an hour), a non-matching one matches
// nothing; a new term keeps the record; a deleted workload's record and
// build records go.
func TestAppSourcesLoop(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	d := gitDesiredSpec(t, "app")
	e.apply(d.Files, api.APIOwner())
	var mu sync.Mutex
	head := ""
	resolve := func(_ context.Context, g quadlet.GitSource) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if g.Branch != "main" {
			return "", fmt.Errorf("unexpected ref %+v", g)
		}
		if head == "" {
			return "", errors.New("branch \"main\" not found")
		}
		return head, nil
	}
	setHead := func(h string) {
		mu.Lock()
		head = h
		mu.Unlock()
	}
	waitCommit := func(want string) {
		t.Helper()
		polltest.UntilErr(t, 10*time.Second, "commit "+want[:8]+" recorded", func() error {
			recs, err := e.repo.ListAppSources(e.ctx)
			if err != nil {
				return err
			}
			r := recs["ns1/app"]
			if r.Commit != want {
				return fmt.Errorf("record %+v", r)
			}
			if r.Ref != "branch main" || r.Repository != "https://git.example.com/app.git" {
				t.Fatalf("record %+v", r)
			}
			return nil
		})
	}
	cfg := Config{AppInterval: time.Hour, Resolve: resolve}
	l, stop := e.run(cfg)
	polltest.Until(t, 10*time.Second, "SourceResolved=False on the workload", func() bool {
		c := condition(e.status("app"), ConditionSourceResolved)
		return c != nil && c.Reason == ReasonResolveFailed && strings.Contains(c.Message, "not found")
	})
	setHead(strings.Repeat("1", 40))
	if n, _ := l.AppSources().DispatchPush(e.ctx, webhook.Push{RepoURLs: []string{"https://git.example.com/app.git"}, Ref: "refs/heads/main"}); n != 1 {
		t.Fatalf("push matched %d", n)
	}
	waitCommit(strings.Repeat("1", 40))
	polltest.Until(t, 10*time.Second, "SourceResolved condition gone after a success", func() bool {
		st := e.status("app")
		return condition(st, ConditionSourceResolved) == nil && st.SourceCommit == strings.Repeat("1", 40)
	})
	setHead(strings.Repeat("2", 40))
	other := webhook.Push{RepoURLs: []string{"https://git.example.com/other.git"}, Ref: "refs/heads/main"}
	if n, _ := l.AppSources().DispatchPush(e.ctx, other); n != 0 {
		t.Fatalf("push to another repository matched %d workloads", n)
	}
	push := webhook.Push{RepoURLs: []string{"https://git.example.com/app"}, Ref: "refs/heads/main"}
	if n, _ := l.AppSources().DispatchPush(e.ctx, push); n != 1 {
		t.Fatalf("push to the app repository matched %d workloads, want 1", n)
	}
	waitCommit(strings.Repeat("2", 40))
	stop()

	// A new term: the record is there before it resolves anything.
	recs, err := e.repo.ListAppSources(e.ctx)
	if err != nil || recs["ns1/app"].Commit != strings.Repeat("2", 40) {
		t.Fatalf("after the term ended: %+v, %v", recs, err)
	}
	// The workload goes: its record and its build records go too.
	if err := e.repo.PutBuildRecordJSON(e.ctx, "ns1", "app", strings.Repeat("2", 40), "n1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	_, stop = e.run(cfg)
	defer stop()
	polltest.Until(t, 10*time.Second, "the deleted workload's records go", func() bool {
		recs, _ := e.repo.ListAppSources(e.ctx)
		kvs, _ := e.repo.ListBuildRecordsJSON(e.ctx, "ns1", "app", "")
		return len(recs) == 0 && len(kvs) == 0
	})
}

// TestStatusFromFactsInAnyOrder: the producers of a workload's facts write
// them in different orders (the Git source's path error, the app source's
// failed re-resolution, a node's failed build, the instance's failure); the
// status loop, the only writer of the status, ends with the same status and
// every condition, whatever the order.
func TestStatusFromFactsInAnyOrder(t *testing.T) {
	t.Parallel()
	commit := strings.Repeat("c", 40)
	orders := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}}
	var first api.WorkloadStatus
	for i, order := range orders {
		e := newLeaderEnv(t)
		owner := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "apps/app", Commit: "c0"}
		e.apply(gitDesiredSpec(t, "app").Files, owner)
		// The resolution succeeded once (the commit is known), the
		// last attempt failed.
		if err := e.repo.PutAppSource(e.ctx, api.AppSource{Namespace: "ns1", Workload: "app",
			Repository: "https://git.example.com/app.git", Ref: "branch main", Commit: commit}); err != nil {
			t.Fatal(err)
		}
		l, stop := e.run(Config{AppInterval: time.Hour, Resolve: func(context.Context, quadlet.GitSource) (string, error) {
			return "", errors.New("ls-remote: connection refused")
		}})
		polltest.Until(t, 10*time.Second, "the instance placed", func() bool { return len(e.assignments("app")) == 1 })
		// The failed instance stays (its replacement waits out a back-off)
		// so that its failure is one of the facts.
		e.holdReplacement(l, "app")
		a := e.assignments("app")[0]
		facts := []func(){
			func() { // gitsync: the directory is invalid at a newer commit
				if err := e.repo.PutSourceStatus(e.ctx, "config", api.SourceStatus{AppliedCommit: "c1",
					PathErrors: []api.PathError{{Path: "apps/app", Error: "apps/app/workload.kat:7: spec.replicas: must be at least 0", Commit: "c1"}}}); err != nil {
					t.Fatal(err)
				}
			},
			func() { // a second source's unrelated error changes nothing
				if err := e.repo.PutSourceStatus(e.ctx, "other", api.SourceStatus{
					PathErrors: []api.PathError{{Path: "apps/app", Error: "not ours"}}}); err != nil {
					t.Fatal(err)
				}
			},
			func() { // node n1's build of the commit failed
				b, _ := json.Marshal(api.Build{Namespace: "ns1", Workload: "app", Commit: commit, Node: "n1",
					State: api.BuildFailed, Error: "podman build: exit status 1", LogTail: "STEP 2/2: RUN false\n"})
				if err := e.repo.PutBuildRecordJSON(e.ctx, "ns1", "app", commit, "n1", b); err != nil {
					t.Fatal(err)
				}
			},
			func() { // the agent reports the instance failed
				e.report(1, api.InstanceStatus{InstanceID: a.InstanceID, Namespace: "ns1", WorkloadName: "app",
					Phase: api.InstanceFailed, Message: "build failed", HealthStatus: api.HealthNotApplicable})
			},
		}
		for _, f := range order {
			facts[f]()
		}
		var st api.WorkloadStatus
		polltest.Until(t, 10*time.Second, fmt.Sprintf("order %v: every condition", order), func() bool {
			st = e.status("app")
			c := condition(st, ConditionStalled)
			return c != nil && c.Reason == ReasonInvalidQuadlet && condition(st, ConditionBuildFailed) != nil &&
				condition(st, ConditionSourceResolved) != nil && st.Phase == api.PhaseFailed
		})
		stop()
		if b := condition(st, ConditionBuildFailed); !strings.Contains(b.Message, "RUN false") || !strings.Contains(b.Message, "node n1") {
			t.Errorf("BuildFailed message %q lacks the node and the log tail", b.Message)
		}
		if !strings.Contains(st.LastError, "spec.replicas") {
			t.Errorf("last error %q, want the invalid directory's first", st.LastError)
		}
		if i == 0 {
			first = st
			continue
		}
		if !sameStatus(st, first) {
			t.Errorf("order %v: status\n%+v\nwant, as in order %v,\n%+v", order, st, orders[0], first)
		}
	}
}

// sameStatus compares statuses without their timestamps (of updates,
// transitions and the last reconcile).
func sameStatus(a, b api.WorkloadStatus) bool {
	strip := func(s api.WorkloadStatus) api.WorkloadStatus {
		s.UpdatedAt, s.LastReconcileTime = time.Time{}, nil
		s.Conditions = append([]api.Condition(nil), s.Conditions...)
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = time.Time{}
		}
		return s
	}
	return statusEqual(strip(a), strip(b))
}

// TestWorkloadInstancesFromTheView: the API's look at a workload's
// instances from the leader's view is what etcd holds: the workload's
// assignments without their files, and the node's latest report of each,
// following a scale-down.
func TestWorkloadInstancesFromTheView(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 2, "v1"), api.APIOwner())
	e.apply(workloadFiles(t, "api", quadlet.TypeService, 1, "v1"), api.APIOwner())
	l, stop := e.run(Config{})
	defer stop()
	polltest.Until(t, 10*time.Second, "three instances placed", func() bool {
		return len(e.assignments("web")) == 2 && len(e.assignments("api")) == 1
	})
	web := e.assignments("web")
	e.report(1, running(web[0]))
	want := func() ([]api.Assignment, map[string]api.InstanceStatus) {
		as, err := e.repo.ListWorkloadAssignments(e.ctx, "ns1", "web")
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.repo.GetNodeStatus(e.ctx, "n1")
		if err != nil {
			t.Fatal(err)
		}
		reports := map[string]api.InstanceStatus{}
		for _, is := range st.WorkloadInstances {
			if slices.ContainsFunc(as, func(a api.Assignment) bool { return a.InstanceID == is.InstanceID }) {
				reports[is.InstanceID] = is
			}
		}
		return as, reports
	}
	same := func() bool {
		as, reports, ok := l.WorkloadInstances("ns1", "web")
		wantAs, wantReports := want()
		return ok && reflect.DeepEqual(as, wantAs) && reflect.DeepEqual(reports, wantReports)
	}
	polltest.Until(t, 10*time.Second, "web's two instances, one reported", same)
	if as, _, _ := l.WorkloadInstances("ns1", "web"); len(as) != 2 || as[0].Files != nil {
		t.Fatalf("web's instances: %+v, want two without their files", as)
	}
	e.apply(workloadFiles(t, "web", quadlet.TypeService, 1, "v1"), api.APIOwner())
	polltest.Until(t, 10*time.Second, "web scaled to one", func() bool { return len(e.assignments("web")) == 1 })
	polltest.Until(t, 10*time.Second, "web's one instance", func() bool {
		as, _, _ := l.WorkloadInstances("ns1", "web")
		return len(as) == 1 && same()
	})
	if as, reports, ok := l.WorkloadInstances("ns1", "none"); !ok || len(as) != 0 || len(reports) != 0 {
		t.Errorf("a workload without instances: %+v, %+v, %v", as, reports, ok)
	}
}
