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

func desiredSpec(t testing.TB, name, typ string, replicas int, hash string) resources.DesiredSpec {
	return resources.DesiredSpec{
		Meta:  resources.WorkloadMeta{Namespace: "ns1", Name: name, Type: typ, Generation: 1, SpecHash: hash},
		Files: workloadFiles(t, name, typ, replicas, "sleep 1"),
	}
}

func assigned(name, hash, suffix string, created int) resources.Assignment {
	return resources.Assignment{
		InstanceID: InstanceID(name, hash, suffix), Node: "n1", Namespace: "ns1", Workload: name, SpecHash: hash,
		CreatedAt: time.Unix(int64(created), 0),
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
	const h1, h2 = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
	tests := []struct {
		name       string
		desired    []resources.DesiredSpec
		current    []resources.Assignment
		wantPut    []string
		wantDelete []string
	}{
		{
			name:    "new service gets replicas instances",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", quadlet.TypeService, 2, h1)},
			wantPut: []string{"web-aaaaaaaa-s0", "web-aaaaaaaa-s1"}, wantDelete: []string{},
		},
		{
			name:    "job and daemon service get one",
			desired: []resources.DesiredSpec{desiredSpec(t, "job", quadlet.TypeJob, 0, h1), desiredSpec(t, "dmn", quadlet.TypeDaemonService, 0, h2)},
			wantPut: []string{"dmn-bbbbbbbb-s1", "job-aaaaaaaa-s0"}, wantDelete: []string{},
		},
		{
			name:    "satisfied workload changes nothing",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", quadlet.TypeService, 2, h1)},
			current: []resources.Assignment{assigned("web", h1, "x", 1), assigned("web", h1, "y", 2)},
			wantPut: []string{}, wantDelete: []string{},
		},
		{
			name:    "replicas down removes the newest",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", quadlet.TypeService, 1, h1)},
			current: []resources.Assignment{assigned("web", h1, "new", 9), assigned("web", h1, "old", 1)},
			wantPut: []string{}, wantDelete: []string{"web-aaaaaaaa-new"},
		},
		{
			name:    "replicas zero removes all",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", quadlet.TypeService, 0, h1)},
			current: []resources.Assignment{assigned("web", h1, "a", 1), assigned("web", h1, "b", 2)},
			wantPut: []string{}, wantDelete: []string{"web-aaaaaaaa-a", "web-aaaaaaaa-b"},
		},
		{
			name:    "deleted workload loses every instance",
			current: []resources.Assignment{assigned("gone", h1, "a", 1), assigned("gone", h2, "b", 2)},
			wantPut: []string{}, wantDelete: []string{"gone-aaaaaaaa-a", "gone-bbbbbbbb-b"},
		},
		{
			name:    "changed spec starts new instances and keeps the old ones",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", quadlet.TypeService, 1, h2)},
			current: []resources.Assignment{assigned("web", h1, "a", 1)},
			wantPut: []string{"web-bbbbbbbb-s0"}, wantDelete: []string{},
		},
		{
			name:    "old instances go once the new ones are assigned",
			desired: []resources.DesiredSpec{desiredSpec(t, "web", quadlet.TypeService, 1, h2)},
			current: []resources.Assignment{assigned("web", h1, "a", 1), assigned("web", h2, "b", 2)},
			wantPut: []string{}, wantDelete: []string{"web-aaaaaaaa-a"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			suffix := func() string { n++; return fmt.Sprintf("s%d", n-1) }
			plan := PlanAssignments("n1", tc.desired, tc.current, time.Unix(100, 0), suffix)
			if got := ids(plan.Put); !slices.Equal(got, tc.wantPut) {
				t.Errorf("put = %v, want %v", got, tc.wantPut)
			}
			if got := ids(plan.Delete); !slices.Equal(got, tc.wantDelete) {
				t.Errorf("delete = %v, want %v", got, tc.wantDelete)
			}
			for _, a := range plan.Put {
				if a.Node != "n1" || a.Image != "localhost/kat-base:latest" || a.RestartPolicy != "Always" || len(a.Files) == 0 {
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
