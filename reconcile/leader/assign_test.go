package leader

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
)

func workloadFiles(t testing.TB, name, typ string, replicas int, cmd string) map[string][]byte {
	t.Helper()
	rep := ""
	if typ == quadlet.TypeService {
		rep = fmt.Sprintf("  replicas: %d\n", replicas)
	}
	files := map[string][]byte{"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: ns1
spec:
  type: %s
  source:
    image: localhost/kat-base:latest
%s  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", %q]
`, name, typ, rep, cmd)}
	if typ == quadlet.TypeJob {
		files["job.kat"] = []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: JobDefinition\nspec: {}\n")
	}
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return files
}

func desiredSpec(t testing.TB, name, typ string, replicas int, cmd string) workload {
	t.Helper()
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: name, Type: typ, Generation: 1},
		workloadFiles(t, name, typ, replicas, cmd))
}

// parsedWorkload is a workload of the view: meta (with the files' spec
// hash) and files, parsed.
func parsedWorkload(t testing.TB, meta api.WorkloadMeta, files map[string][]byte) workload {
	t.Helper()
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: meta.Namespace})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	meta.SpecHash = q.SpecHash()
	return workload{Meta: meta, MetaVersion: 1, Files: files, Spec: specOf(q)}
}

// tmpl is the TemplateHash of a fixture workload.
func tmpl(t testing.TB, name, typ, cmd string) string {
	t.Helper()
	q, err := quadlet.ParseWorkload(workloadFiles(t, name, typ, 1, cmd), quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return TemplateHash(q)
}

func assigned(name, hash, suffix string, created int) api.Assignment {
	return api.Assignment{
		InstanceID: InstanceID(name, hash, suffix), Node: "n1", Namespace: "ns1", Workload: name, SpecHash: hash,
		TemplateHash: hash, CreatedAt: time.Unix(int64(created), 0),
	}
}

func ids(as []api.Assignment) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.InstanceID)
	}
	slices.Sort(out)
	return out
}

func TestPlanAssignments(t *testing.T) {
	t.Parallel()
	svc := quadlet.TypeService
	w1, w2 := tmpl(t, "web", svc, "v1"), tmpl(t, "web", svc, "v2")
	id := func(hash, suffix string) string { return InstanceID("web", hash, suffix) }
	tests := []struct {
		name       string
		desired    []workload
		current    []api.Assignment
		reported   []string // instance IDs reported running
		wantPut    []string
		wantDelete []string
		// wantOrphaned are the workloads the plan deletes without a
		// desired state (AssignmentPlan.Orphaned).
		wantOrphaned []string
	}{
		{
			name:    "new service gets replicas instances",
			desired: []workload{desiredSpec(t, "web", svc, 2, "v1")},
			wantPut: []string{id(w1, "s0"), id(w1, "s1")}, wantDelete: []string{},
		},
		{
			name:       "a daemon service gets one, a job starts its run first (jobs_test.go)",
			desired:    []workload{desiredSpec(t, "job", quadlet.TypeJob, 0, "v1"), desiredSpec(t, "dmn", quadlet.TypeDaemonService, 0, "v1")},
			wantPut:    []string{InstanceID("dmn", tmpl(t, "dmn", quadlet.TypeDaemonService, "v1"), "s0")},
			wantDelete: []string{},
		},
		{
			name:    "satisfied workload changes nothing",
			desired: []workload{desiredSpec(t, "web", svc, 2, "v1")},
			current: []api.Assignment{assigned("web", w1, "x", 1), assigned("web", w1, "y", 2)},
			wantPut: []string{}, wantDelete: []string{},
		},
		{
			name:    "scaling up keeps the instances and adds one",
			desired: []workload{desiredSpec(t, "web", svc, 3, "v1")},
			current: []api.Assignment{assigned("web", w1, "x", 1), assigned("web", w1, "y", 2)},
			wantPut: []string{id(w1, "s0")}, wantDelete: []string{},
		},
		{
			name:    "replicas down removes the newest",
			desired: []workload{desiredSpec(t, "web", svc, 1, "v1")},
			current: []api.Assignment{assigned("web", w1, "new", 9), assigned("web", w1, "old", 1)},
			wantPut: []string{}, wantDelete: []string{id(w1, "new")},
		},
		{
			name:    "replicas zero removes all",
			desired: []workload{desiredSpec(t, "web", svc, 0, "v1")},
			current: []api.Assignment{assigned("web", w1, "a", 1), assigned("web", w1, "b", 2)},
			wantPut: []string{}, wantDelete: []string{id(w1, "a"), id(w1, "b")},
		},
		{
			name:    "deleted workload loses every instance",
			current: []api.Assignment{assigned("gone", w1, "a", 1), assigned("gone", w2, "b", 2)},
			wantPut: []string{}, wantDelete: []string{InstanceID("gone", w1, "a"), InstanceID("gone", w2, "b")},
			wantOrphaned: []string{"ns1/gone"},
		},
		{
			name:    "changed spec starts new instances and keeps the old ones",
			desired: []workload{desiredSpec(t, "web", svc, 1, "v2")},
			current: []api.Assignment{assigned("web", w1, "a", 1)},
			wantPut: []string{id(w2, "s0")}, wantDelete: []string{},
		},
		{
			name:    "old instances stay while the new ones are only assigned",
			desired: []workload{desiredSpec(t, "web", svc, 1, "v2")},
			current: []api.Assignment{assigned("web", w1, "a", 1), assigned("web", w2, "b", 2)},
			wantPut: []string{}, wantDelete: []string{},
		},
		{
			name:     "old instances go once the new ones are ready",
			desired:  []workload{desiredSpec(t, "web", svc, 1, "v2")},
			current:  []api.Assignment{assigned("web", w1, "a", 1), assigned("web", w2, "b", 2)},
			reported: []string{id(w2, "b")},
			wantPut:  []string{}, wantDelete: []string{id(w1, "a")},
		},
		{
			name:     "an old instance goes for each new one ready",
			desired:  []workload{desiredSpec(t, "web", svc, 2, "v2")},
			current:  []api.Assignment{assigned("web", w1, "a", 1), assigned("web", w1, "c", 1), assigned("web", w2, "b", 2), assigned("web", w2, "d", 2)},
			reported: []string{id(w2, "b"), id(w1, "a"), id(w1, "c")},
			wantPut:  []string{}, wantDelete: []string{id(w1, "a")},
		},
		{
			name:    "built from Git without a resolved commit is left alone",
			desired: []workload{gitDesiredSpec(t, "app")},
			wantPut: []string{}, wantDelete: []string{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			suffix := func() string { n++; return fmt.Sprintf("s%d", n-1) }
			reported := map[string]api.InstanceStatus{}
			for _, id := range tc.reported {
				reported[id] = api.InstanceStatus{InstanceID: id, Phase: api.InstanceRunning, HealthStatus: api.HealthNotApplicable}
			}
			plan := PlanAssignments(AssignInput{Nodes: oneNode(), Desired: tc.desired, Current: tc.current, Reported: reported, Now: time.Unix(100, 0), NewSuffix: suffix})
			want := slices.Sorted(slices.Values(tc.wantPut))
			if got := ids(plan.Put); !slices.Equal(got, want) {
				t.Errorf("put = %v, want %v", got, want)
			}
			want = slices.Sorted(slices.Values(tc.wantDelete))
			if got := ids(plan.Delete); !slices.Equal(got, want) {
				t.Errorf("delete = %v, want %v", got, want)
			}
			if !slices.Equal(plan.Orphaned, tc.wantOrphaned) {
				t.Errorf("orphaned = %v, want %v", plan.Orphaned, tc.wantOrphaned)
			}
			for _, a := range plan.Put {
				if a.Node != "n1" || a.Image != "localhost/kat-base:latest" || a.RestartPolicy != "Always" || len(a.Files) == 0 || a.TemplateHash == "" {
					t.Errorf("assignment %s incomplete: %+v", a.InstanceID, a)
				}
			}
		})
	}
}

func TestInstanceID(t *testing.T) {
	t.Parallel()
	if got := InstanceID("web", "0123456789abcdef", "a1b2c"); got != "web-01234567-a1b2c" {
		t.Fatalf("InstanceID = %q", got)
	}
	if s, s2, s3 := RandomSuffix(), RandomSuffix(), RandomSuffix(); len(s) != 5 || (s == s2 && s == s3) {
		t.Fatalf("RandomSuffix = %q", s)
	}
}

func gitDesiredSpec(t testing.TB, name string) workload {
	t.Helper()
	files := map[string][]byte{"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: ns1
spec:
  type: Service
  replicas: 1
  source:
    git:
      repository: https://git.example.com/app.git
      branch: main
  restartPolicy:
    condition: Always
  container:
    command: ["httpd", "-f"]
`, name), "build.kat": []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: BuildDefinition\nspec:\n  buildContext: .\n  dockerfilePath: Dockerfile\n")}
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return parsedWorkload(t, api.WorkloadMeta{Namespace: "ns1", Name: name, Type: quadlet.TypeService, Generation: 1}, files)
}

func TestPlanAssignmentsGitCommit(t *testing.T) {
	t.Parallel()
	d := gitDesiredSpec(t, "app")
	c1, c2 := "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	n := 0
	suffix := func() string { n++; return fmt.Sprintf("s%d", n) }
	in := AssignInput{Nodes: oneNode(), Desired: []workload{d}, Commits: map[string]string{"ns1/app": c1}, Now: time.Unix(1, 0), NewSuffix: suffix}
	plan := PlanAssignments(in)
	if len(plan.Put) != 1 {
		t.Fatalf("put = %v", ids(plan.Put))
	}
	a := plan.Put[0]
	if a.Image != "kat-local/ns1_app:111111111111" || a.SourceCommit != c1 || a.Build == nil || a.Build.Commit != c1 ||
		a.Build.Repository != "https://git.example.com/app.git" {
		t.Fatalf("assignment = %+v", a)
	}
	// Same commit: nothing to do. A new commit: a new instance first, the
	// old one stays until the new one is ready.
	in.Current = plan.Put
	if p := PlanAssignments(in); !p.Empty() {
		t.Fatalf("same commit: plan = %+v", p)
	}
	in.Commits["ns1/app"] = c2
	p := PlanAssignments(in)
	if len(p.Put) != 1 || len(p.Delete) != 0 || p.Put[0].Build.Commit != c2 || p.Put[0].TemplateHash == a.TemplateHash {
		t.Fatalf("new commit: plan = put %v delete %v", ids(p.Put), ids(p.Delete))
	}
	in.Current = append(in.Current, p.Put[0])
	in.Reported = map[string]api.InstanceStatus{p.Put[0].InstanceID: {Phase: api.InstanceRunning, HealthStatus: api.HealthHealthy}}
	if p2 := PlanAssignments(in); len(p2.Put) != 0 || !slices.Equal(ids(p2.Delete), []string{a.InstanceID}) {
		t.Fatalf("new instance ready: plan = put %v delete %v", ids(p2.Put), ids(p2.Delete))
	}
	// A new instance whose health check has not passed yet does not count.
	in.Reported[p.Put[0].InstanceID] = api.InstanceStatus{Phase: api.InstanceRunning, HealthStatus: api.HealthPending}
	if p3 := PlanAssignments(in); !p3.Empty() {
		t.Fatalf("new instance not healthy yet: plan = put %v delete %v", ids(p3.Put), ids(p3.Delete))
	}
}

func TestReplaceStale(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                    string
		stale, readyFresh, want int
		replace                 bool
	}{
		{"no old instances", 0, 0, 2, false},
		{"new ones not ready", 2, 0, 2, false},
		{"some new ones ready", 2, 1, 2, false},
		{"all new ones ready", 2, 2, 2, true},
		{"scaled to zero", 1, 0, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := replaceStale(tc.stale, tc.readyFresh, tc.want); got != tc.replace {
				t.Fatalf("replaceStale(%d, %d, %d) = %v", tc.stale, tc.readyFresh, tc.want, got)
			}
		})
	}
}

// slotted is an assignment of workload name with a user namespace slot.
func slotted(name string, slot int) api.Assignment {
	a := assigned(name, "old", name, 0)
	a.UserNSSlot = &slot
	return a
}

func TestPlanAssignmentsUserNSSlots(t *testing.T) {
	t.Parallel()
	svc := quadlet.TypeService
	tests := []struct {
		name    string
		desired []workload
		current []api.Assignment
		// used are the slots held by workloads outside the plan.
		used []int
		want map[string]int // slot of each put, by workload
	}{
		{
			name:    "first workload gets slot 0, replicas share it",
			desired: []workload{desiredSpec(t, "web", svc, 3, "v1")},
			want:    map[string]int{"web": 0},
		},
		{
			name:    "two workloads planned together get distinct lowest slots",
			desired: []workload{desiredSpec(t, "api", svc, 2, "v1"), desiredSpec(t, "web", svc, 2, "v1")},
			want:    map[string]int{"api": 0, "web": 1},
		},
		{
			name:    "lowest free slot skips the held ones",
			desired: []workload{desiredSpec(t, "a", svc, 1, "v1"), desiredSpec(t, "web", svc, 1, "v1"), desiredSpec(t, "c", svc, 1, "v1"), desiredSpec(t, "d", svc, 1, "v1")},
			current: []api.Assignment{slotted("a", 0), slotted("c", 2)},
			want:    map[string]int{"a": 0, "web": 1, "c": 2, "d": 3},
		},
		{
			name:    "a workload keeps its slot across a template change",
			desired: []workload{desiredSpec(t, "web", svc, 2, "v2")},
			current: []api.Assignment{slotted("web", 5)},
			want:    map[string]int{"web": 5},
		},
		{
			name:    "a deleted workload's slot is held while it has assignments",
			desired: []workload{desiredSpec(t, "web", svc, 1, "v1")},
			current: []api.Assignment{slotted("gone", 0)},
			want:    map[string]int{"web": 1},
		},
		{
			name:    "and reused once its assignments are deleted",
			desired: []workload{desiredSpec(t, "web", svc, 1, "v1")},
			current: []api.Assignment{slotted("other", 1)},
			want:    map[string]int{"web": 0},
		},
		{
			name:    "a plan of some workloads skips the slots the others hold",
			desired: []workload{desiredSpec(t, "web", svc, 1, "v1"), desiredSpec(t, "api", svc, 1, "v1")},
			current: []api.Assignment{slotted("web", 1)},
			used:    []int{0, 1, 2, 4},
			want:    map[string]int{"web": 1, "api": 3},
		},
		{
			name:    "assignments without a slot hold none",
			desired: []workload{desiredSpec(t, "web", svc, 2, "v2")},
			current: []api.Assignment{assigned("web", "old", "x", 0), assigned("other", "old", "y", 0)},
			want:    map[string]int{"web": 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			in := AssignInput{
				Nodes: oneNode(), Desired: tc.desired, Current: tc.current, Now: time.Unix(100, 0),
				NewSuffix: func() string { n++; return fmt.Sprintf("s%d", n) },
			}
			if tc.used != nil {
				in.SlotUsed = func(s int) bool { return slices.Contains(tc.used, s) }
			}
			plan := PlanAssignments(in)
			got := map[string]int{}
			for _, a := range plan.Put {
				if a.UserNSSlot == nil {
					t.Fatalf("put %s has no slot", a.InstanceID)
				}
				if s, ok := got[a.Workload]; ok && s != *a.UserNSSlot {
					t.Fatalf("workload %s has slots %d and %d", a.Workload, s, *a.UserNSSlot)
				}
				got[a.Workload] = *a.UserNSSlot
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("slots: got %v, want %v", got, tc.want)
			}
		})
	}
}

// oneNode is a cluster of one Ready node n1 without declared resources.
func oneNode() []sched.Node { return []sched.Node{{Name: "n1", Ready: true}} }
