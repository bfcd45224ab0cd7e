package resources_test

import (
	"context"
	"fmt"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestAuditLogIsCapped: AppendAudit keeps the newest keep entries, and
// ListAudit returns them oldest first.
func TestAuditLogIsCapped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r, st := newRepo(t)
	const keep = 10
	for i := range keep + 5 {
		if err := r.AppendAudit(ctx, api.AuditEntry{Actor: "admin", Verb: "apply", Resource: "workload", Name: fmt.Sprint(i), Status: 200}, keep); err != nil {
			t.Fatal(err)
		}
	}
	es, err := r.ListAudit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != keep || es[0].Name != "5" || es[keep-1].Name != fmt.Sprint(keep+4) || es[0].Time.IsZero() {
		t.Fatalf("kept %d entries, %+v ... %+v; want names 5 to %d", len(es), es[0], es[len(es)-1], keep+4)
	}
	if kvs, err := st.List(ctx, resources.AuditPrefix()); err != nil || len(kvs) != keep {
		t.Fatalf("%d keys under %s (%v), want %d", len(kvs), resources.AuditPrefix(), err, keep)
	}
}

// BenchmarkAppendAuditFull measures one entry appended to a full audit log
// of DefaultAuditKeep entries (a write, a count of the keys and the trim of
// the oldest), what each audited API call adds.
func BenchmarkAppendAuditFull(b *testing.B) {
	ctx := context.Background()
	r := resources.New(storetest.New(b))
	e := api.AuditEntry{Actor: "admin", Verb: "apply", Resource: "workload", Namespace: "default", Name: "web", Status: 200, Remote: "127.0.0.1"}
	for range resources.DefaultAuditKeep {
		if err := r.AppendAudit(ctx, e, -1); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if err := r.AppendAudit(ctx, e, 0); err != nil {
			b.Fatal(err)
		}
	}
}
