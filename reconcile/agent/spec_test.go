package agent

import (
	"errors"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// TestSpecBuilderUserNS: every container gets its slot's explicit uid map;
// without a sub-id range, a slot, or with a slot past the range, the spec is
// refused with a reason, never handed to --userns=auto.
func TestSpecBuilderUserNS(t *testing.T) {
	q, err := quadlet.ParseWorkload(graceWorkload(""), quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := &runtime.SubIDRange{Start: 100000, Count: 3 * runtime.IDMapSize}
	slot := func(n int) *int { return &n }
	for _, tc := range []struct {
		name     string
		ids      *runtime.SubIDRange
		slot     *int
		wantBase int64
		wantErr  string
	}{
		{name: "slot 0", ids: ids, slot: slot(0), wantBase: 100000},
		{name: "slot 2", ids: ids, slot: slot(2), wantBase: 100000 + 2*runtime.IDMapSize},
		{name: "no sub-id range", slot: slot(0), wantErr: `no sub-id range for user "containers"`},
		{name: "no slot", ids: ids, wantErr: "assignment web-1 has no userNSSlot"},
		{name: "slot past the range", ids: ids, slot: slot(3), wantErr: "userNSSlot 3 of assignment web-1 is outside the node's sub-id range 100000:196608 (3 slots)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			build := NewSpecBuilder("n1", t.TempDir(), tc.ids)
			a := api.Assignment{InstanceID: "web-1", Namespace: "ns1", Workload: "web", Generation: 1,
				Image: "localhost/kat-base:latest", UserNSSlot: tc.slot}
			spec, err := build(a, q, SpecInputs{})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrNoUserNS) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want ErrNoUserNS saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if spec.IDMap == nil || spec.IDMap.HostBase != tc.wantBase || spec.UserNS != "" {
				t.Fatalf("IDMap %+v, UserNS %q; want base %d and no --userns", spec.IDMap, spec.UserNS, tc.wantBase)
			}
		})
	}
}
