package reconcile

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
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

func desiredSpec(t testing.TB, name, typ string, replicas int, cmd string) resources.DesiredSpec {
	return resources.DesiredSpec{
		Meta:  resources.WorkloadMeta{Namespace: "ns1", Name: name, Type: typ, Generation: 1, SpecHash: "spec-" + cmd},
		Files: workloadFiles(t, name, typ, replicas, cmd),
	}
}

// tmpl is the TemplateHash of a fixture workload.
func tmpl(t testing.TB, name, typ, cmd string) string {
	q, err := quadlet.ParseWorkload(workloadFiles(t, name, typ, 1, cmd), quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return TemplateHash(q)
}

func assigned(name, hash, suffix string, created int) resources.Assignment {
	return resources.Assignment{
		InstanceID: InstanceID(name, hash, suffix), Node: "n1", Namespace: "ns1", Workload: name, SpecHash: hash,
		TemplateHash: hash, CreatedAt: time.Unix(int64(created), 0),
	}
}

func ids(as []resources.Assignment) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.InstanceID)
	}
	slices.Sort(out)
	return out
}

func TestPlanAssignments(t *testing.T) {
	svc := quadlet.TypeService
	w1, w2 := tmpl(t, "web", svc, "v1"), tmpl(t, "web", svc, "v2")
	id := func(hash, suffix string) string { return InstanceID("web", hash, suffix) }
	tests := []struct {
		name       string
		desired    []resources.DesiredSpec
		current    []resources.Assignment
		wantPut    []string
		wantDelete []string
	}{
		{
			name:    "new service gets replicas instances",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 2, "v1")},
			wantPut: []string{id(w1, "s0"), id(w1, "s1")}, wantDelete: []string{},
		},
		{
			name:       "job and daemon service get one",
			desired:    []resources.DesiredSpec{desiredSpec(t, "job", quadlet.TypeJob, 0, "v1"), desiredSpec(t, "dmn", quadlet.TypeDaemonService, 0, "v1")},
			wantPut:    []string{InstanceID("dmn", tmpl(t, "dmn", quadlet.TypeDaemonService, "v1"), "s1"), InstanceID("job", tmpl(t, "job", quadlet.TypeJob, "v1"), "s0")},
			wantDelete: []string{},
		},
		{
			name:    "satisfied workload changes nothing",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 2, "v1")},
			current: []resources.Assignment{assigned("web", w1, "x", 1), assigned("web", w1, "y", 2)},
			wantPut: []string{}, wantDelete: []string{},
		},
		{
			name:    "scaling up keeps the instances and adds one",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 3, "v1")},
			current: []resources.Assignment{assigned("web", w1, "x", 1), assigned("web", w1, "y", 2)},
			wantPut: []string{id(w1, "s0")}, wantDelete: []string{},
		},
		{
			name:    "replicas down removes the newest",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 1, "v1")},
			current: []resources.Assignment{assigned("web", w1, "new", 9), assigned("web", w1, "old", 1)},
			wantPut: []string{}, wantDelete: []string{id(w1, "new")},
		},
		{
			name:    "replicas zero removes all",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 0, "v1")},
			current: []resources.Assignment{assigned("web", w1, "a", 1), assigned("web", w1, "b", 2)},
			wantPut: []string{}, wantDelete: []string{id(w1, "a"), id(w1, "b")},
		},
		{
			name:    "deleted workload loses every instance",
			current: []resources.Assignment{assigned("gone", w1, "a", 1), assigned("gone", w2, "b", 2)},
			wantPut: []string{}, wantDelete: []string{InstanceID("gone", w1, "a"), InstanceID("gone", w2, "b")},
		},
		{
			name:    "changed spec starts new instances and keeps the old ones",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 1, "v2")},
			current: []resources.Assignment{assigned("web", w1, "a", 1)},
			wantPut: []string{id(w2, "s0")}, wantDelete: []string{},
		},
		{
			name:    "old instances go once the new ones are assigned",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", svc, 1, "v2")},
			current: []resources.Assignment{assigned("web", w1, "a", 1), assigned("web", w2, "b", 2)},
			wantPut: []string{}, wantDelete: []string{id(w1, "a")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			suffix := func() string { n++; return fmt.Sprintf("s%d", n-1) }
			plan := PlanAssignments("n1", tc.desired, tc.current, time.Unix(100, 0), suffix)
			want := slices.Sorted(slices.Values(tc.wantPut))
			if got := ids(plan.Put); !slices.Equal(got, want) {
				t.Errorf("put = %v, want %v", got, want)
			}
			want = slices.Sorted(slices.Values(tc.wantDelete))
			if got := ids(plan.Delete); !slices.Equal(got, want) {
				t.Errorf("delete = %v, want %v", got, want)
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
	if got := InstanceID("web", "0123456789abcdef", "a1b2c"); got != "web-01234567-a1b2c" {
		t.Fatalf("InstanceID = %q", got)
	}
	if s := RandomSuffix(); len(s) != 5 || s == RandomSuffix() && s == RandomSuffix() {
		t.Fatalf("RandomSuffix = %q", s)
	}
}
