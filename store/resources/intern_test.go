package resources

import (
	"encoding/json"
	"testing"
	"unsafe"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// same reports whether a and b are one copy of a string.
func same(a, b string) bool { return a == b && unsafe.StringData(a) == unsafe.StringData(b) }

func TestDecodedMetasShareTheirCommonStrings(t *testing.T) {
	t.Parallel()
	var es []desiredEntry
	for _, name := range []string{"web", "db"} {
		m := api.WorkloadMeta{
			UID: "uid-" + name, Namespace: "default", Name: name, Type: "Service", SpecHash: "hash-" + name,
			Owner: api.Owner{Kind: api.OwnerGit, Source: "config", Path: "apps/" + name, Commit: "0123456789abcdef0123456789abcdef01234567"},
			Files: []string{"workload.kat"},
		}
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := decodeDesiredEntry(store.KV{Key: MetaKey("default", name), Value: raw, Version: 1})
		if !ok {
			t.Fatalf("meta of %s not decoded", name)
		}
		es = append(es, e)
	}
	a, b := es[0].meta, es[1].meta
	for field, pair := range map[string][2]string{
		"namespace": {a.Namespace, b.Namespace}, "type": {a.Type, b.Type}, "owner.kind": {a.Owner.Kind, b.Owner.Kind},
		"owner.source": {a.Owner.Source, b.Owner.Source}, "owner.commit": {a.Owner.Commit, b.Owner.Commit},
		"files[0]": {a.Files[0], b.Files[0]},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("%s: the two metas hold %q apart, want one copy", field, pair[0])
		}
	}
	if a.Name != "web" || b.Name != "db" || a.Owner.Path != "apps/web" || b.SpecHash != "hash-db" {
		t.Errorf("decoded metas changed: %+v, %+v", a, b)
	}
}

func TestInternStatusAndRollout(t *testing.T) {
	t.Parallel()
	decode := func(v any, into any) {
		raw, err := json.Marshal(v)
		if err == nil {
			err = json.Unmarshal(raw, into)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	st := api.WorkloadStatus{Phase: api.PhaseReady, SourceCommit: "abc", Conditions: []api.Condition{
		{Type: "Available", Status: api.ConditionTrue, Reason: "InstancesReady", Message: "0 of 0 instances ready"},
	}}
	var s1, s2 api.WorkloadStatus
	decode(st, &s1)
	decode(st, &s2)
	InternStatus(&s1)
	InternStatus(&s2)
	c1, c2 := s1.Conditions[0], s2.Conditions[0]
	for field, pair := range map[string][2]string{
		"phase": {s1.Phase, s2.Phase}, "sourceCommit": {s1.SourceCommit, s2.SourceCommit},
		"conditions[0].type": {c1.Type, c2.Type}, "conditions[0].status": {c1.Status, c2.Status},
		"conditions[0].reason": {c1.Reason, c2.Reason}, "conditions[0].message": {c1.Message, c2.Message},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("status %s: held apart, want one copy", field)
		}
	}

	ro := api.Rollout{Generation: 2, Outcomes: map[int64]string{1: "succeeded"}, Failure: &api.RolloutFailure{Reason: "ProgressDeadlineExceeded", Message: "m"}}
	var r1, r2 api.Rollout
	decode(ro, &r1)
	decode(ro, &r2)
	InternRollout(&r1)
	InternRollout(&r2)
	if !same(r1.Outcomes[1], r2.Outcomes[1]) || !same(r1.Failure.Reason, r2.Failure.Reason) {
		t.Error("rollouts hold their outcome or failure reason apart, want one copy")
	}
	if r1.Outcomes[1] != "succeeded" || r2.Failure.Message != "m" {
		t.Errorf("interned rollout changed: %+v", r1)
	}
}
