package resources_test

import (
	"fmt"
	"testing"

	"kat.dws.rip/kat/store/resources"
)

// TestWriteAssignmentsInBatches: a plan larger than one transaction is
// written whole, its puts and then its deletes, and the revision returned
// is the last write's, so that a reader waiting for it sees every change.
func TestWriteAssignmentsInBatches(t *testing.T) {
	t.Parallel()
	r, st := newRepo(t)
	ctx := t.Context()
	var as []resources.Assignment
	for i := range 450 {
		as = append(as, resources.Assignment{Node: fmt.Sprintf("n%d", i%3), InstanceID: fmt.Sprintf("web-%03d", i), Namespace: "default", Workload: "web"})
	}
	rev, err := r.WriteAssignments(ctx, as, nil)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := st.List(ctx, resources.AssignmentsPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != len(as) {
		t.Fatalf("%d assignments stored, want %d", len(kvs), len(as))
	}
	for _, kv := range kvs {
		if kv.Version > rev {
			t.Fatalf("%s written at %d, after the revision returned (%d)", kv.Key, kv.Version, rev)
		}
	}
	rev2, err := r.WriteAssignments(ctx, as[:1], as[1:])
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.ListAssignments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].InstanceID != "web-000" || rev2 <= rev {
		t.Fatalf("after deleting all but one: %d left, revision %d after %d", len(got), rev2, rev)
	}
}
