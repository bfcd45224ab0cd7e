package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// readsPerTxn is how many requests one read transaction of ApplyWorkloads
// serves: a meta and at most one namespace each.
const readsPerTxn = maxOpsPerTxn / 2

// ApplyOutcome is what ApplyWorkloads did with one request: its result, or
// why it was refused.
type ApplyOutcome struct {
	Result *ApplyResult
	Err    error
}

// ApplyWorkloads applies many workloads, each exactly as ApplyWorkload does
// (its manifests, meta and archive entry in one transaction, a new generation
// only when its spec hash changes), several to a transaction: one read
// transaction fetches the metas and namespaces of up to 50 requests, and
// their writes are packed into transactions of at most 100 operations and
// 512 KiB. A request refused on its own (ownership, suspension, a missing
// namespace) gets the error ApplyWorkload would return in its outcome and
// never holds up the others; a transaction whose checks fail (a concurrent
// writer) is written again one workload at a time. It returns one outcome per
// request, in order; its error is a store failure that stopped it.
func (r *Repo) ApplyWorkloads(ctx context.Context, reqs []ApplyRequest) ([]ApplyOutcome, error) {
	out := make([]ApplyOutcome, len(reqs))
	b := &txnBatch{}
	flush := func() error {
		members := b.members
		txn, err := b.txn(ctx, r.st)
		if err != nil {
			return fmt.Errorf("apply workloads: %w", err)
		}
		for _, m := range members {
			if !txn.Committed {
				res, err := r.ApplyWorkload(ctx, reqs[m.i])
				out[m.i] = ApplyOutcome{Result: res, Err: err}
				continue
			}
			m.res.Revision = txn.Revision
			out[m.i] = ApplyOutcome{Result: m.res}
		}
		return nil
	}
	for start := 0; start < len(reqs); start += readsPerTxn {
		chunk := reqs[start:min(len(reqs), start+readsPerTxn)]
		planned, err := r.planApplies(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for j, p := range planned {
			i := start + j
			switch {
			case p.err != nil:
				out[i] = ApplyOutcome{Err: p.err}
				continue
			case p.ops == nil:
				out[i] = ApplyOutcome{Result: p.res}
				continue
			}
			if !b.fits(p.checks, p.ops) && len(b.members) > 0 {
				if err := flush(); err != nil {
					return nil, err
				}
			}
			b.add(batchMember{i: i, res: p.res}, p.checks, p.ops)
		}
	}
	if len(b.members) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// plannedApply is one request of a batch, decided: its outcome when nothing
// is to be written, else its checks and writes.
type plannedApply struct {
	res    *ApplyResult
	err    error
	checks []store.Compare
	ops    []store.Op
}

// planApplies reads what the requests need in one transaction and decides
// each as applyOnce does.
func (r *Repo) planApplies(ctx context.Context, reqs []ApplyRequest) ([]plannedApply, error) {
	var gets []store.Op
	nsAt := map[string]int{}
	metaAt := make([]int, len(reqs))
	for i, req := range reqs {
		if req.Quadlet == nil {
			continue
		}
		ns := req.Quadlet.Namespace()
		if _, ok := nsAt[ns]; !ok {
			nsAt[ns] = len(gets)
			gets = append(gets, store.Op{Type: store.OpGet, Key: NamespaceKey(ns)})
		}
		metaAt[i] = len(gets)
		gets = append(gets, store.Op{Type: store.OpGet, Key: MetaKey(ns, req.Quadlet.Name())})
	}
	read, err := r.st.Txn(ctx, nil, gets, nil)
	if err != nil {
		return nil, fmt.Errorf("apply workloads: read: %w", err)
	}
	out := make([]plannedApply, len(reqs))
	for i, req := range reqs {
		if req.Quadlet == nil {
			out[i].err = errors.New("apply workload: no quadlet")
			continue
		}
		if req.Owner.Kind == "" {
			req.Owner = api.APIOwner()
		}
		ns, name := req.Quadlet.Namespace(), req.Quadlet.Name()
		if len(req.Adopt) > 0 {
			out[i].err = fmt.Errorf("apply workload %s/%s: adopt instances: %w: ApplyWorkload only", ns, name, ErrInvalid)
			continue
		}
		p, err := r.planFrom(ctx, req, read.Results[nsAt[ns]].KV, read.Results[metaAt[i]].KV)
		if err != nil {
			var se storeError
			if errors.As(err, &se) {
				return nil, fmt.Errorf("apply workload %s/%s: %w", ns, name, se.err)
			}
			p.err = fmt.Errorf("apply workload %s/%s: %w", ns, name, err)
		}
		out[i] = p
	}
	return out, nil
}

// storeError marks a failure of the store, which stops a batch, apart from a
// request's own refusal.
type storeError struct{ err error }

func (e storeError) Error() string { return e.err.Error() }

// planFrom decides one request from its namespace and current meta as read.
func (r *Repo) planFrom(ctx context.Context, req ApplyRequest, nsKV, metaKV *store.KV) (plannedApply, error) {
	q := req.Quadlet
	ns, name := q.Namespace(), q.Name()
	if nsKV == nil {
		return plannedApply{}, fmt.Errorf("namespace %q: %w", ns, ErrNotFound)
	}
	var cur *api.WorkloadMeta
	var metaVer int64
	if metaKV != nil {
		cur, metaVer = &api.WorkloadMeta{}, metaKV.Version
		if err := json.Unmarshal(metaKV.Value, cur); err != nil {
			return plannedApply{}, fmt.Errorf("decode %s: %w", metaKV.Key, err)
		}
	}
	var archived []int64
	if cur != nil && cur.SpecHash != q.SpecHash() {
		var err error
		if archived, err = r.archivedGenerations(ctx, ns, name); err != nil {
			return plannedApply{}, storeError{err}
		}
	}
	plan, err := planApply(cur, archived, req, r.archiveKeep, r.now().UTC(), r.newUID())
	if err != nil {
		return plannedApply{}, err
	}
	res := &ApplyResult{Meta: plan.meta, Created: plan.created, Changed: plan.changed}
	if !plan.changed {
		return plannedApply{res: res}, nil
	}
	ops, err := r.applyOps(ctx, q, plan)
	if err != nil {
		return plannedApply{}, err
	}
	checks := []store.Compare{{Key: MetaKey(ns, name), ExpectedVersion: metaVer}, {Key: NamespaceKey(ns), ExpectedVersion: nsKV.Version}}
	return plannedApply{res: res, checks: checks, ops: ops}, nil
}

// StatusWrite is one workload status for WriteWorkloadStatuses, with the
// versions WriteWorkloadStatus checks.
type StatusWrite struct {
	Namespace, Name            string
	Status                     api.WorkloadStatus
	MetaVersion, StatusVersion int64
}

// WriteWorkloadStatuses writes statuses as WriteWorkloadStatus does, several
// to a transaction (at most 50, within 512 KiB). A transaction whose checks
// fail is written again one status at a time, so that only the statuses
// whose workload moved on are refused. It returns whether each status was
// written, and the store revision after the last write.
func (r *Repo) WriteWorkloadStatuses(ctx context.Context, ws []StatusWrite) ([]bool, int64, error) {
	written := make([]bool, len(ws))
	var last int64
	b := &txnBatch{}
	flush := func() error {
		members := b.members
		res, err := b.txn(ctx, r.st)
		if err != nil {
			return fmt.Errorf("write workload statuses: %w", err)
		}
		if res.Committed {
			last = max(last, res.Revision)
		}
		for _, m := range members {
			if res.Committed {
				written[m.i] = true
				continue
			}
			w := ws[m.i]
			ok, rev, err := r.WriteWorkloadStatus(ctx, w.Namespace, w.Name, w.Status, w.MetaVersion, w.StatusVersion)
			if err != nil {
				return err
			}
			written[m.i] = ok
			if ok {
				last = max(last, rev)
			}
		}
		return nil
	}
	for i, w := range ws {
		op, err := putJSON(StatusKey(w.Namespace, w.Name), w.Status)
		if err != nil {
			return nil, 0, err
		}
		checks := []store.Compare{{Key: MetaKey(w.Namespace, w.Name), ExpectedVersion: w.MetaVersion},
			{Key: StatusKey(w.Namespace, w.Name), ExpectedVersion: w.StatusVersion}}
		if !b.fits(checks, []store.Op{op}) && len(b.members) > 0 {
			if err := flush(); err != nil {
				return nil, 0, err
			}
		}
		b.add(batchMember{i: i}, checks, []store.Op{op})
	}
	if len(b.members) > 0 {
		if err := flush(); err != nil {
			return nil, 0, err
		}
	}
	return written, last, nil
}
