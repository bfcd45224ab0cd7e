package resources_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// TestApplyAdopts: a workload created with instances to adopt gets them
// as its assignments in the same write, stamped with its generation, spec
// hash and files, their addresses recorded; one whose address is held or
// whose slot another workload holds refuses the whole apply, writing
// nothing; adopting is refused but on creation and in a batch.
func TestApplyAdopts(t *testing.T) {
	t.Parallel()
	r, st := newRepo(t)
	ctx := t.Context()
	slot := func(n int) *int { return &n }
	held := api.Assignment{Node: "n1", InstanceID: "db-1", Namespace: "default", Workload: "db", IP: netip.MustParseAddr("10.100.0.2"), UserNSSlot: slot(0)}
	if _, err := r.WriteAssignments(ctx, []api.Assignment{held}, nil); err != nil {
		t.Fatal(err)
	}
	mine := api.Assignment{Node: "n1", InstanceID: "web-abcdefab-00001", Type: "Service", Generation: 9, TemplateHash: "abcdefab",
		IP: netip.MustParseAddr("10.100.0.3"), UserNSSlot: slot(1)}
	for _, tc := range []struct {
		name  string
		adopt api.Assignment
		want  error
	}{
		{"a held address", func() api.Assignment { a := mine; a.IP = held.IP; return a }(), resources.ErrAddressTaken},
		{"another workload's slot", func() api.Assignment { a := mine; a.UserNSSlot = slot(0); return a }(), resources.ErrSlotTaken},
	} {
		before := snapshotOf(t, st)
		_, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: service(t, "default", "web", 1), CreateOnly: true, Adopt: []api.Assignment{tc.adopt}})
		if !errors.Is(err, tc.want) {
			t.Fatalf("adopting an instance with %s: %v, want %v", tc.name, err, tc.want)
		}
		if snapshotOf(t, st) != before {
			t.Fatalf("adopting an instance with %s wrote something", tc.name)
		}
	}
	q := service(t, "default", "web", 1)
	if _, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Adopt: []api.Assignment{mine}}); !errors.Is(err, resources.ErrInvalid) {
		t.Fatalf("adopting without CreateOnly: %v, want ErrInvalid", err)
	}
	outs, err := r.ApplyWorkloads(ctx, []resources.ApplyRequest{{Quadlet: q, CreateOnly: true, Adopt: []api.Assignment{mine}}})
	if err != nil || !errors.Is(outs[0].Err, resources.ErrInvalid) {
		t.Fatalf("adopting in a batch: %v %v, want ErrInvalid", outs, err)
	}
	res, err := r.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, CreateOnly: true, Adopt: []api.Assignment{mine}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.GetAssignment(ctx, "n1", mine.InstanceID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "default" || got.Workload != "web" || got.Generation != res.Meta.Generation || got.SpecHash != q.SpecHash() ||
		got.TemplateHash != mine.TemplateHash || got.IP != mine.IP || *got.UserNSSlot != 1 || string(got.Files["workload.kat"]) != string(q.Files["workload.kat"]) {
		t.Fatalf("adopted assignment %+v", got)
	}
	if kv, err := st.Get(ctx, resources.IPAMKey("n1", mine.IP)); err != nil || string(kv.Value) != mine.InstanceID {
		t.Fatalf("address key of the adopted instance: %v %v", kv, err)
	}
}

// snapshotOf renders every key and value of st.
func snapshotOf(t *testing.T, st store.StateStore) string {
	t.Helper()
	kvs, err := st.List(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, kv := range kvs {
		fmt.Fprintf(&b, "%s=%q\n", kv.Key, kv.Value)
	}
	return b.String()
}
