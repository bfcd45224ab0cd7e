package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
)

const prefixRollouts = "/kat/workloads/rollouts/"

// RolloutKey is where the leader keeps a workload's rollout record.
func RolloutKey(ns, name string) string { return prefixRollouts + ns + "/" + name }

// RolloutsPrefix is the prefix of every workload's rollout record, written
// by the leader's placement loop only.
func RolloutsPrefix() string { return prefixRollouts }

// GetRollout returns a workload's rollout record; a workload the leader has
// not planned yet has none (ok false).
func (r *Repo) GetRollout(ctx context.Context, ns, name string) (api.Rollout, bool, error) {
	var ro api.Rollout
	ver, err := r.getJSON(ctx, RolloutKey(ns, name), &ro)
	if err != nil {
		return api.Rollout{}, false, fmt.Errorf("get rollout of %s/%s: %w", ns, name, err)
	}
	return ro, ver != 0, nil
}

// RolloutWrite is one rollout record to write, fenced by the version of the
// workload's meta the leader planned from, so a record never outlives its
// workload.
type RolloutWrite struct {
	Namespace, Name string
	Rollout         api.Rollout
	MetaVersion     int64
}

// WriteRollouts writes rollout records, each in its own transaction; a
// record whose workload's meta moved on is skipped (the next pass plans the
// new meta). It returns the highest revision written, 0 when none was.
func (r *Repo) WriteRollouts(ctx context.Context, ws []RolloutWrite) (int64, error) {
	var rev int64
	for _, w := range ws {
		op, err := putJSON(RolloutKey(w.Namespace, w.Name), w.Rollout)
		if err != nil {
			return 0, err
		}
		res, err := r.st.Txn(ctx, []store.Compare{{Key: MetaKey(w.Namespace, w.Name), ExpectedVersion: w.MetaVersion}},
			[]store.Op{op}, nil)
		if err != nil {
			return 0, fmt.Errorf("write rollout of %s/%s: %w", w.Namespace, w.Name, err)
		}
		if res.Committed {
			rev = max(rev, res.Revision)
		}
	}
	return rev, nil
}

// archivedMetas returns the meta of every archived generation of a
// workload, oldest first.
func (r *Repo) archivedMetas(ctx context.Context, ns, name string) ([]api.WorkloadMeta, error) {
	kvs, err := r.st.List(ctx, ArchivePrefix(ns, name))
	if err != nil {
		return nil, fmt.Errorf("list archive of %s/%s: %w", ns, name, err)
	}
	var out []api.WorkloadMeta
	for _, kv := range kvs {
		if !strings.HasSuffix(kv.Key, "/meta") {
			continue
		}
		var m api.WorkloadMeta
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b api.WorkloadMeta) int { return int(a.Generation - b.Generation) })
	return out, nil
}

// DeriveHistory lists the archived generations of a workload, oldest first,
// each with its outcome. It is pure. A generation that a later one rolled
// back from is OutcomeRolledBack; else its settled outcome in ro; else the
// current generation is OutcomeInProgress and an older one
// OutcomeSuperseded.
func DeriveHistory(archived []api.WorkloadMeta, ro api.Rollout, current int64) []api.HistoryEntry {
	rolledBack := map[int64]bool{}
	for _, m := range archived {
		if m.Rollback != nil {
			rolledBack[m.Rollback.From] = true
		}
	}
	out := make([]api.HistoryEntry, 0, len(archived))
	for _, m := range archived {
		e := api.HistoryEntry{WorkloadMeta: m}
		switch {
		case rolledBack[m.Generation]:
			e.Outcome = api.OutcomeRolledBack
		case ro.Outcomes[m.Generation] != "":
			e.Outcome = ro.Outcomes[m.Generation]
		case m.Generation == current:
			e.Outcome = api.OutcomeInProgress
		default:
			e.Outcome = api.OutcomeSuperseded
		}
		out = append(out, e)
	}
	return out
}

// WorkloadHistory returns the archived generations of workload ns/name with
// their outcomes (DeriveHistory).
func (r *Repo) WorkloadHistory(ctx context.Context, ns, name string) ([]api.HistoryEntry, error) {
	w, err := r.GetWorkload(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	metas, err := r.archivedMetas(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	ro, _, err := r.GetRollout(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	return DeriveHistory(metas, ro, w.Generation), nil
}

// RollbackTarget picks the generation a rollback of the current generation
// cur (with spec hash curHash) applies again: the newest archived one before
// cur whose rollout succeeded and whose spec differs from the current one.
// It is pure; ok is false when there is none.
func RollbackTarget(archived []api.WorkloadMeta, ro api.Rollout, cur int64, curHash string) (int64, bool) {
	for i := len(archived) - 1; i >= 0; i-- {
		m := archived[i]
		if m.Generation < cur && ro.Outcomes[m.Generation] == api.OutcomeSucceeded && m.SpecHash != curHash {
			return m.Generation, true
		}
	}
	return 0, false
}

// RollbackRequest asks to apply an archived generation's files again.
type RollbackRequest struct {
	Namespace, Name string
	// ToGeneration is the generation to go back to; 0: the previous one
	// that rolled out successfully (RollbackTarget).
	ToGeneration int64
	// FromGeneration, when set, makes the rollback happen only while it is
	// the current generation (the leader's automatic rollback: a newer
	// apply wins). Default 0: whatever is current.
	FromGeneration int64
	// Auto marks a rollback the leader makes after a failed rollout.
	Auto bool
}

// ErrNoRollbackTarget is returned by RollbackWorkload when no archived
// generation qualifies. It matches ErrNotFound.
var ErrNoRollbackTarget = fmt.Errorf("no earlier generation rolled out successfully: %w", ErrNotFound)

// RollbackWorkload applies the archived files of an earlier generation as a
// new generation, marked with a RollbackRef. It writes as the API with
// force: a Git-owned workload's Git management is suspended (ApplyResult's
// Meta.Suspended), so the next Git sync does not undo the rollback. It
// returns the apply's result and the generation whose files it applied.
func (r *Repo) RollbackWorkload(ctx context.Context, req RollbackRequest) (*ApplyResult, int64, error) {
	ns, name := req.Namespace, req.Name
	w, err := r.GetWorkload(ctx, ns, name)
	if err != nil {
		return nil, 0, err
	}
	cur := w.Generation
	if req.FromGeneration != 0 && req.FromGeneration != cur {
		return nil, 0, fmt.Errorf("roll back %s/%s from generation %d: generation %d is current now: %w",
			ns, name, req.FromGeneration, cur, ErrConflict)
	}
	metas, err := r.archivedMetas(ctx, ns, name)
	if err != nil {
		return nil, 0, err
	}
	to := req.ToGeneration
	switch {
	case to == 0:
		ro, _, err := r.GetRollout(ctx, ns, name)
		if err != nil {
			return nil, 0, err
		}
		var ok bool
		if to, ok = RollbackTarget(metas, ro, cur, w.SpecHash); !ok {
			return nil, 0, fmt.Errorf("roll back %s/%s from generation %d: %w", ns, name, cur, ErrNoRollbackTarget)
		}
	case to >= cur:
		return nil, 0, fmt.Errorf("roll back %s/%s: --to-generation %d: %w: it must be older than the current generation %d",
			ns, name, to, ErrInvalid, cur)
	}
	i := slices.IndexFunc(metas, func(m api.WorkloadMeta) bool { return m.Generation == to })
	if i < 0 {
		return nil, 0, fmt.Errorf("roll back %s/%s: generation %d is not in the archive (kept: %s): %w",
			ns, name, to, generationList(metas), ErrNotFound)
	}
	if metas[i].SpecHash == w.SpecHash {
		return nil, 0, fmt.Errorf("roll back %s/%s: generation %d has the spec generation %d runs already: %w",
			ns, name, to, cur, ErrConflict)
	}
	files, err := r.ArchivedFiles(ctx, ns, name, to)
	if err != nil {
		return nil, 0, err
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: ns})
	if err != nil {
		return nil, 0, fmt.Errorf("roll back %s/%s: the archived files of generation %d: %w", ns, name, to, err)
	}
	res, err := r.ApplyWorkload(ctx, ApplyRequest{Quadlet: q, Owner: api.APIOwner(), Force: true,
		Rollback: &api.RollbackRef{From: cur, To: to, Auto: req.Auto}})
	if err != nil {
		return nil, 0, err
	}
	return res, to, nil
}

func generationList(metas []api.WorkloadMeta) string {
	if len(metas) == 0 {
		return "none"
	}
	s := make([]string, len(metas))
	for i, m := range metas {
		s[i] = fmt.Sprint(m.Generation)
	}
	return strings.Join(s, ", ")
}

// IsNoRollbackTarget reports whether err says no generation qualified for a
// rollback.
func IsNoRollbackTarget(err error) bool { return errors.Is(err, ErrNoRollbackTarget) }
