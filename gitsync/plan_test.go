package gitsync

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

func testQuadlet(t *testing.T, ns, name string, replicas int) *quadlet.Quadlet {
	t.Helper()
	q, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: workloadYAML(ns, name, replicas)}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return q
}

func workloadYAML(ns, name string, replicas int) []byte {
	return fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: %s
spec:
  type: Service
  source:
    image: localhost/kat-base:latest
  replicas: %d
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "sleep 3600"]
`, name, ns, replicas)
}

func gitMeta(q *quadlet.Quadlet, source, path string) api.WorkloadMeta {
	return api.WorkloadMeta{Namespace: q.Namespace(), Name: q.Name(), SpecHash: q.SpecHash(), Generation: 1,
		Owner: api.Owner{Kind: api.OwnerGit, Source: source, Path: path, Commit: "old"}}
}

// render describes a plan as sorted lines, for comparison.
func render(p Plan) string {
	var lines []string
	for _, a := range p.Apply {
		lines = append(lines, "apply "+a.Path+" "+a.Quadlet.Namespace()+"/"+a.Quadlet.Name())
	}
	for _, d := range p.Delete {
		lines = append(lines, "delete "+d.String()+" ("+d.Path+")")
	}
	for _, s := range p.Suspended {
		lines = append(lines, "suspended "+s.String())
	}
	for _, e := range p.PathErrors {
		lines = append(lines, "error "+e.Path)
	}
	if p.Unchanged > 0 {
		lines = append(lines, fmt.Sprintf("unchanged %d", p.Unchanged))
	}
	if p.Refused != "" {
		lines = append(lines, "refused")
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestChangedPaths(t *testing.T) {
	t.Parallel()
	prev := &Listing{Dirs: map[string]string{"a": "1", "b": "2", "c": "3"}, Namespaces: map[string]string{"ns/namespace.kat": "9"}}
	next := Listing{Dirs: map[string]string{"a": "1", "b": "22", "d": "4"}, Namespaces: map[string]string{"ns/namespace.kat": "9"}}
	got := ChangedPaths(prev, next)
	if !slices.Equal(got.Dirs, []string{"b", "d"}) || len(got.Namespaces) != 0 {
		t.Errorf("ChangedPaths = %+v, want dirs [b d] and no namespaces", got)
	}
	retried := WithRetries(got, next, []api.PathError{{Path: "a"}, {Path: "gone"}})
	if !slices.Equal(retried.Dirs, []string{"a", "b", "d"}) {
		t.Errorf("WithRetries = %v, want [a b d]: listed directories with errors are parsed again", retried.Dirs)
	}
	all := ChangedPaths(nil, next)
	if !slices.Equal(all.Dirs, []string{"a", "b", "d"}) || !slices.Equal(all.Namespaces, []string{"ns/namespace.kat"}) {
		t.Errorf("ChangedPaths(nil) = %+v, want everything", all)
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	web1, web2 := testQuadlet(t, "default", "web", 1), testQuadlet(t, "default", "web", 2)
	db := testQuadlet(t, "default", "db", 1)
	web3 := testQuadlet(t, "default", "web3", 1)
	bad := errors.New("workload.kat:3: spec: broken")
	suspended := gitMeta(web1, "config", "apps/web")
	suspended.Suspended = true
	apiOwned := gitMeta(web1, "", "")
	apiOwned.Owner = api.APIOwner()
	otherSource := gitMeta(web1, "other", "apps/web")

	tests := []struct {
		name string
		in   DecideInput
		want string
	}{
		{
			name: "new directory is applied",
			in:   DecideInput{Listing: dirs("apps/web"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web1}}},
			want: "apply apps/web default/web",
		},
		{
			name: "changed spec is applied",
			in: DecideInput{Listing: dirs("apps/web"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web2}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "apply apps/web default/web",
		},
		{
			name: "full compare skips equal spec hash",
			in: DecideInput{Full: true, Listing: dirs("apps/web", "apps/db"),
				Parsed:  map[string]ParsedDir{"apps/web": {Quadlet: web1}, "apps/db": {Quadlet: db}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "apply apps/db default/db\nunchanged 1",
		},
		{
			name: "removed directory is pruned",
			in: DecideInput{Listing: dirs("apps/db"), Parsed: map[string]ParsedDir{},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web"), gitMeta(db, "config", "apps/db")}},
			want: "delete default/web (apps/web)",
		},
		{
			name: "pruning every workload is refused",
			in: DecideInput{Listing: dirs(), Parsed: map[string]ParsedDir{},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web"), gitMeta(db, "config", "apps/db")}},
			want: "refused",
		},
		{
			name: "a commit sees only the workloads it may touch: one pruned of two owned is not a prune-all",
			in: DecideInput{Listing: dirs("apps/db"), Parsed: map[string]ParsedDir{}, Owned: 2,
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "delete default/web (apps/web)",
		},
		{
			name: "and pruning all it owns is refused",
			in: DecideInput{Listing: dirs(), Parsed: map[string]ParsedDir{}, Owned: 1,
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "refused",
		},
		{
			name: "pruning every workload is allowed when the source says so",
			in: DecideInput{AllowPruneAll: true, Listing: dirs(), Parsed: map[string]ParsedDir{},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "delete default/web (apps/web)",
		},
		{
			name: "replacing every workload by new ones is not a prune-all",
			in: DecideInput{Listing: dirs("apps/web3"), Parsed: map[string]ParsedDir{"apps/web3": {Quadlet: web3}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "apply apps/web3 default/web3\ndelete default/web (apps/web)",
		},
		{
			name: "invalid directory keeps its workload and reports its error",
			in: DecideInput{Listing: dirs("apps/web", "apps/db"), Parsed: map[string]ParsedDir{"apps/web": {Err: bad}, "apps/db": {Quadlet: db}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")}},
			want: "apply apps/db default/db\nerror apps/web",
		},
		{
			name: "error of an unchanged directory is kept",
			in: DecideInput{Listing: dirs("apps/web", "apps/db"), Parsed: map[string]ParsedDir{"apps/db": {Quadlet: db}},
				PrevErrors: []api.PathError{{Path: "apps/web", Error: "x"}}},
			want: "apply apps/db default/db\nerror apps/web",
		},
		{
			name: "fixing commit clears the error",
			in: DecideInput{Listing: dirs("apps/web"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web2}},
				Current:    []api.WorkloadMeta{gitMeta(web1, "config", "apps/web")},
				PrevErrors: []api.PathError{{Path: "apps/web", Error: "x"}}},
			want: "apply apps/web default/web",
		},
		{
			name: "error of a removed directory goes",
			in: DecideInput{AllowPruneAll: true, Listing: dirs(), Parsed: map[string]ParsedDir{},
				PrevErrors: []api.PathError{{Path: "apps/web", Error: "x"}}},
			want: "",
		},
		{
			name: "suspended workload is neither written nor pruned",
			in: DecideInput{AllowPruneAll: true, Listing: dirs("apps/web"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web2}},
				Current: []api.WorkloadMeta{suspended}},
			want: "suspended default/web",
		},
		{
			name: "api-owned workload is adopted",
			in: DecideInput{Full: true, Listing: dirs("apps/web"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web1}},
				Current: []api.WorkloadMeta{apiOwned}},
			want: "apply apps/web default/web",
		},
		{
			name: "workload of another source is an error",
			in: DecideInput{Listing: dirs("apps/web"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web1}},
				Current: []api.WorkloadMeta{otherSource}},
			want: "error apps/web",
		},
		{
			name: "two directories defining one workload",
			in:   DecideInput{Listing: dirs("a/web", "b/web"), Parsed: map[string]ParsedDir{"a/web": {Quadlet: web1}, "b/web": {Quadlet: web2}}},
			want: "apply a/web default/web\nerror b/web",
		},
		{
			name: "moved directory keeps its workload",
			in: DecideInput{Listing: dirs("apps/web2", "apps/db"), Parsed: map[string]ParsedDir{"apps/web2": {Quadlet: web1}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web"), gitMeta(db, "config", "apps/db")}},
			want: "apply apps/web2 default/web",
		},
		{
			name: "new directory claiming an unchanged directory's workload",
			in: DecideInput{Listing: dirs("a", "b"), Parsed: map[string]ParsedDir{"b": {Quadlet: web2}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "a")}},
			want: "error b",
		},
		{
			name: "renamed workload prunes the old name",
			in: DecideInput{Listing: dirs("apps/web", "apps/db"), Parsed: map[string]ParsedDir{"apps/web": {Quadlet: web3}},
				Current: []api.WorkloadMeta{gitMeta(web1, "config", "apps/web"), gitMeta(db, "config", "apps/db")}},
			want: "apply apps/web default/web3\ndelete default/web (apps/web)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Source, tc.in.Commit = "config", "c0ffee"
			if got := render(Decide(tc.in)); got != tc.want {
				t.Errorf("plan:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func dirs(paths ...string) Listing {
	l := Listing{Dirs: map[string]string{}, Namespaces: map[string]string{}}
	for _, p := range paths {
		l.Dirs[p] = "tree-" + p
	}
	return l
}

func TestDescribePrefixesFiles(t *testing.T) {
	t.Parallel()
	_, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata:\n  name: BAD\n")}, quadlet.ParseOptions{})
	if err == nil {
		t.Fatal("want a parse error")
	}
	msg := describe("apps/web", err)
	if !strings.HasPrefix(msg, "apps/web/workload.kat:") {
		t.Errorf("describe = %q, want it to start with apps/web/workload.kat:LINE", msg)
	}
}
