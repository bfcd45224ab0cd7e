package resources

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

func quadletFor(t *testing.T, replicas int) *quadlet.Quadlet {
	t.Helper()
	q, err := quadlet.ParseWorkload(map[string][]byte{
		"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web}
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: %d
  restartPolicy: {condition: Always}
  container: {command: [/bin/true]}
`, replicas),
	}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func suspended(m *api.WorkloadMeta) *api.WorkloadMeta {
	m.Suspended = true
	return m
}

func TestPlanApply(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	q1, q2 := quadletFor(t, 1), quadletFor(t, 2)
	existing := func(owner api.Owner) *api.WorkloadMeta {
		return &api.WorkloadMeta{UID: "u1", Namespace: "default", Name: "web", Type: "Service", Generation: 4,
			SpecHash: q1.SpecHash(), Owner: owner, Files: []string{"old.kat", "workload.kat"}, CreatedAt: now.Add(-time.Hour)}
	}
	gitOwner := api.Owner{Kind: api.OwnerGit, Source: "config", Path: "apps/web", Commit: "abc"}
	tests := []struct {
		name      string
		cur       *api.WorkloadMeta
		archived  []int64
		req       ApplyRequest
		wantErr   error
		wantGen   int64
		created   bool
		changed   bool
		suspended bool
		stale     []string
		prune     []int64
	}{
		{name: "new workload starts at generation 1", req: ApplyRequest{Quadlet: q1, Owner: api.APIOwner()},
			wantGen: 1, created: true, changed: true},
		{name: "same spec changes nothing", cur: existing(api.APIOwner()), req: ApplyRequest{Quadlet: q1, Owner: api.APIOwner()},
			wantGen: 4},
		{name: "new spec moves the generation and drops files no longer sent", cur: existing(api.APIOwner()),
			req: ApplyRequest{Quadlet: q2, Owner: api.APIOwner()}, wantGen: 5, changed: true, stale: []string{"old.kat"}},
		{name: "create-only on an existing workload", cur: existing(api.APIOwner()),
			req: ApplyRequest{Quadlet: q2, Owner: api.APIOwner(), CreateOnly: true}, wantErr: ErrAlreadyExists},
		{name: "api write to a git-owned workload is refused", cur: existing(gitOwner),
			req: ApplyRequest{Quadlet: q2, Owner: api.APIOwner()}, wantErr: ErrConflict},
		{name: "forced api write suspends git management", cur: existing(gitOwner),
			req: ApplyRequest{Quadlet: q2, Owner: api.APIOwner(), Force: true}, wantGen: 5, changed: true, suspended: true,
			stale: []string{"old.kat"}},
		{name: "forced write of the same spec still suspends", cur: existing(gitOwner),
			req: ApplyRequest{Quadlet: q1, Owner: api.APIOwner(), Force: true}, wantGen: 4, changed: true, suspended: true},
		{name: "git write to a suspended workload is refused", cur: suspended(existing(gitOwner)),
			req: ApplyRequest{Quadlet: q2, Owner: gitOwner}, wantErr: ErrSuspended},
		{name: "git resume writes and ends the suspension", cur: suspended(existing(gitOwner)),
			req: ApplyRequest{Quadlet: q2, Owner: gitOwner, Resume: true}, wantGen: 5, changed: true, stale: []string{"old.kat"}},
		{name: "git write to another source's workload is refused", cur: existing(api.Owner{Kind: api.OwnerGit, Source: "other", Path: "x"}),
			req: ApplyRequest{Quadlet: q2, Owner: gitOwner}, wantErr: ErrConflict},
		{name: "git adopts an api-owned workload", cur: existing(api.APIOwner()),
			req: ApplyRequest{Quadlet: q1, Owner: gitOwner}, wantGen: 4, changed: true},
		{name: "archive keeps the newest generations", cur: existing(api.APIOwner()), archived: []int64{1, 2, 3, 4},
			req: ApplyRequest{Quadlet: q2, Owner: api.APIOwner()}, wantGen: 5, changed: true, stale: []string{"old.kat"},
			prune: []int64{1, 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planApply(tc.cur, tc.archived, tc.req, 3, now, "new-uid")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.meta.Generation != tc.wantGen || p.created != tc.created || p.changed != tc.changed ||
				p.meta.Suspended != tc.suspended {
				t.Fatalf("plan = gen %d created %v changed %v suspended %v; want gen %d created %v changed %v suspended %v",
					p.meta.Generation, p.created, p.changed, p.meta.Suspended, tc.wantGen, tc.created, tc.changed, tc.suspended)
			}
			if !slices.Equal(p.staleFiles, tc.stale) || !slices.Equal(p.pruneGens, tc.prune) {
				t.Fatalf("stale %v prune %v; want stale %v prune %v", p.staleFiles, p.pruneGens, tc.stale, tc.prune)
			}
			if tc.created && p.meta.UID != "new-uid" {
				t.Fatalf("new workload: uid %q", p.meta.UID)
			}
			if tc.suspended && p.meta.Owner != gitOwner {
				t.Fatalf("forced write changed the owner to %+v; Git must stay the owner while suspended", p.meta.Owner)
			}
		})
	}
}
