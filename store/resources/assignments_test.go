package resources_test

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// TestWriteAssignmentsInBatches: a plan larger than one transaction is
// written whole, its puts and then its deletes, and the revision returned
// is the last write's, so that a reader waiting for it sees every change.
func TestWriteAssignmentsInBatches(t *testing.T) {
	t.Parallel()
	r, st := newRepo(t)
	ctx := t.Context()
	var as []api.Assignment
	for i := range 450 {
		as = append(as, api.Assignment{Node: fmt.Sprintf("n%d", i%3), InstanceID: fmt.Sprintf("web-%03d", i), Namespace: "default", Workload: "web"})
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

// TestWriteAssignmentsRecordsAddresses: an assignment with an IP is written
// with its address key, in batches that keep the two together; one whose
// address is held already is refused with ErrAddressTaken and nothing of
// its transaction is written; deleting an assignment deletes its key.
func TestWriteAssignmentsRecordsAddresses(t *testing.T) {
	t.Parallel()
	r, st := newRepo(t)
	ctx := t.Context()
	var as []api.Assignment
	ip := netip.MustParseAddr("10.100.0.2")
	for i := range 120 { // more than one transaction holds
		as = append(as, api.Assignment{Node: "n1", InstanceID: fmt.Sprintf("web-%03d", i), Namespace: "default", Workload: "web", IP: ip})
		ip = ip.Next()
	}
	if _, err := r.WriteAssignments(ctx, as, nil); err != nil {
		t.Fatal(err)
	}
	count := func(prefix string) int {
		kvs, err := st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		return len(kvs)
	}
	for _, a := range as {
		kv, err := st.Get(ctx, resources.IPAMKey("n1", a.IP))
		if err != nil || string(kv.Value) != a.InstanceID {
			t.Fatalf("address key of %s: %v %v", a.InstanceID, kv, err)
		}
	}
	clash := []api.Assignment{
		{Node: "n1", InstanceID: "api-1", Namespace: "default", Workload: "api", IP: netip.MustParseAddr("10.100.1.2")},
		{Node: "n1", InstanceID: "api-2", Namespace: "default", Workload: "api", IP: as[7].IP},
	}
	_, err := r.WriteAssignments(ctx, clash, nil)
	if !errors.Is(err, resources.ErrAddressTaken) {
		t.Fatalf("writing an assignment on a held address: %v, want ErrAddressTaken", err)
	}
	if n, m := count(resources.AssignmentsPrefix()), count(resources.IPAMPrefix()); n != 120 || m != 120 {
		t.Errorf("after the refused write: %d assignments and %d address keys, want 120 of each", n, m)
	}
	if kv, _ := st.Get(ctx, resources.IPAMKey("n1", as[7].IP)); string(kv.Value) != as[7].InstanceID {
		t.Errorf("the held address now names %q", kv.Value)
	}
	if _, err := r.WriteAssignments(ctx, nil, as[:100]); err != nil {
		t.Fatal(err)
	}
	if n, m := count(resources.AssignmentsPrefix()), count(resources.IPAMPrefix()); n != 20 || m != 20 {
		t.Errorf("after deleting 100: %d assignments and %d address keys, want 20 of each", n, m)
	}
}

// TestListAssignmentsOfWorkloadAndWithoutFiles: the lists that leave the
// files out answer what ListAssignments does with Files nil, and the list of
// one workload only that workload's, matched on namespace and name both.
func TestListAssignmentsOfWorkloadAndWithoutFiles(t *testing.T) {
	t.Parallel()
	r, _ := newRepo(t)
	ctx := t.Context()
	gpu, slot := 1, 3
	files := map[string][]byte{"workload.kat": []byte("kind: Workload\n")}
	var as []api.Assignment
	for i, w := range []struct{ ns, name string }{{"default", "web"}, {"default", "api"}, {"other", "web"}, {"default", "web"}, {"default", "webx"}} {
		as = append(as, api.Assignment{Node: fmt.Sprintf("n%d", i%2), InstanceID: fmt.Sprintf("%s-%d", w.name, i), Namespace: w.ns, Workload: w.name,
			Type: "Service", Generation: 2, Image: "img", Ports: []int{80}, Files: files, UserNSSlot: &slot, CPUMillis: 100, GPU: &gpu,
			Build: &api.BuildRef{Repository: "https://example.com/r.git", Commit: "abc"}, IP: netip.MustParseAddr(fmt.Sprintf("10.100.0.%d", 10+i))})
	}
	if _, err := r.WriteAssignments(ctx, as, nil); err != nil {
		t.Fatal(err)
	}
	full, err := r.ListAssignments(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(full) != len(as) || full[0].Files == nil {
		t.Fatalf("ListAssignments = %+v, want %d assignments with their files", full, len(as))
	}
	var bare, web []api.Assignment
	for _, a := range full {
		a.Files = nil
		bare = append(bare, a)
		if a.Namespace == "default" && a.Workload == "web" {
			web = append(web, a)
		}
	}
	got, err := r.ListAssignmentsWithoutFiles(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, bare) {
		t.Errorf("ListAssignmentsWithoutFiles = %+v, want %+v", got, bare)
	}
	got, err = r.ListWorkloadAssignments(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(web) != 2 || !reflect.DeepEqual(got, web) {
		t.Errorf("ListWorkloadAssignments(default, web) = %+v, want %+v", got, web)
	}
	if got, err := r.ListWorkloadAssignments(ctx, "default", "none"); err != nil || len(got) != 0 {
		t.Errorf("ListWorkloadAssignments of a workload without instances = %+v, %v, want none", got, err)
	}
	one, err := r.GetAssignment(ctx, full[1].Node, full[1].InstanceID)
	if err != nil || !reflect.DeepEqual(one, full[1]) {
		t.Errorf("GetAssignment(%s, %s) = %+v, %v, want %+v", full[1].Node, full[1].InstanceID, one, err, full[1])
	}
	if _, err := r.GetAssignment(ctx, "n0", "none"); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("GetAssignment of no instance: %v, want ErrNotFound", err)
	}
}
