package resources_test

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

func TestDeriveHistory(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0).UTC()
	meta := func(gen int64, hash string, rb *api.RollbackRef) api.WorkloadMeta {
		return api.WorkloadMeta{Generation: gen, SpecHash: hash, UpdatedAt: t0.Add(time.Duration(gen) * time.Minute),
			Owner: api.Owner{Kind: api.OwnerGit, Source: "cfg", Path: "web", Commit: fmt.Sprintf("c%d", gen)}, Rollback: rb}
	}
	tests := []struct {
		name     string
		archived []api.WorkloadMeta
		outcomes map[int64]string
		current  int64
		want     []string
	}{
		{
			name:     "current generation in progress, the one before succeeded",
			archived: []api.WorkloadMeta{meta(1, "h1", nil), meta(2, "h2", nil)},
			outcomes: map[int64]string{1: api.OutcomeSucceeded}, current: 2,
			want: []string{"1 succeeded", "2 in progress"},
		},
		{
			name:     "a failed generation rolled back automatically",
			archived: []api.WorkloadMeta{meta(1, "h1", nil), meta(2, "h2", nil), meta(3, "h1", &api.RollbackRef{From: 2, To: 1, Auto: true})},
			outcomes: map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeFailed, 3: api.OutcomeSucceeded}, current: 3,
			want: []string{"1 succeeded", "2 rolled back", "3 succeeded"},
		},
		{
			name:     "failed without a rollback (autoRollback false)",
			archived: []api.WorkloadMeta{meta(1, "h1", nil), meta(2, "h2", nil)},
			outcomes: map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeFailed}, current: 2,
			want: []string{"1 succeeded", "2 failed"},
		},
		{
			name:     "replaced before its rollout ended",
			archived: []api.WorkloadMeta{meta(4, "h4", nil), meta(5, "h5", nil), meta(6, "h6", nil)},
			outcomes: map[int64]string{4: api.OutcomeSucceeded}, current: 6,
			want: []string{"4 succeeded", "5 superseded", "6 in progress"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := resources.DeriveHistory(tc.archived, api.Rollout{Outcomes: tc.outcomes}, tc.current)
			var got []string
			for i, e := range h {
				got = append(got, fmt.Sprintf("%d %s", e.Generation, e.Outcome))
				m := tc.archived[i]
				if !reflect.DeepEqual(e.WorkloadMeta, m) {
					t.Errorf("entry %d = %+v, want the archived meta %+v", i, e, m)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("history = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRollbackTarget(t *testing.T) {
	t.Parallel()
	metas := []api.WorkloadMeta{{Generation: 1, SpecHash: "a"}, {Generation: 2, SpecHash: "b"}, {Generation: 3, SpecHash: "c"},
		{Generation: 4, SpecHash: "a"}}
	ro := api.Rollout{Outcomes: map[int64]string{1: api.OutcomeSucceeded, 2: api.OutcomeSucceeded, 3: api.OutcomeFailed}}
	tests := []struct {
		name   string
		cur    int64
		hash   string
		want   int64
		wantOK bool
	}{
		{"the newest earlier success", 3, "c", 2, true},
		{"a failed generation is skipped", 4, "a", 2, true},
		{"one with the current spec is skipped", 3, "b", 1, true},
		{"none before the first", 1, "a", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := resources.RollbackTarget(metas, ro, tc.cur, tc.hash)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("RollbackTarget = %d, %v, want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
