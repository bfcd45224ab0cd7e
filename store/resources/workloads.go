package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
)

// ApplyRequest is one write of a workload's desired state.
type ApplyRequest struct {
	// Quadlet is the parsed and validated workload directory.
	Quadlet *quadlet.Quadlet
	// Owner is who is writing: APIOwner() or a Git source.
	Owner api.Owner
	// Force lets an API write replace a Git-owned workload, suspending Git
	// management of it.
	Force bool
	// CreateOnly refuses to replace an existing workload (HTTP POST).
	CreateOnly bool
	// Resume lets a Git write replace a workload whose Git management is
	// suspended, and ends the suspension.
	Resume bool
	// Rollback marks the new generation as written by a rollback. Default
	// nil: an ordinary apply.
	Rollback *api.RollbackRef
	// Adopt are instances of the workload that run already, recorded as
	// its assignments in the transaction that creates it (with
	// CreateOnly), stamped with its first generation, spec hash and
	// files: a detached node's hand-back, so that the cluster's leader
	// finds them in place rather than placing new ones. Their addresses
	// must be free on their nodes (else ErrAddressTaken) and their slots
	// held by no other workload (else ErrSlotTaken). ApplyWorkload only.
	Adopt []api.Assignment
}

// ApplyResult says what an apply did.
type ApplyResult struct {
	Meta api.WorkloadMeta
	// Created is true when the workload did not exist before.
	Created bool
	// Changed is true when anything was written: a new workload, a new
	// generation, or a change of owner or suspension.
	Changed bool
	// Revision is the store revision of the write; 0 when nothing was
	// written.
	Revision int64
}

// applyPlan is the pure decision of an apply: what the new metadata is, which
// manifest files disappear, and whether anything changes at all.
type applyPlan struct {
	meta       api.WorkloadMeta
	created    bool
	newSpec    bool // the generation moved: write manifests and archive
	changed    bool
	staleFiles []string
	pruneGens  []int64
}

// planApply decides an apply from the current metadata (nil when the workload
// does not exist), the archived generations and the request.
func planApply(cur *api.WorkloadMeta, archived []int64, req ApplyRequest, keep int, now time.Time, uid string) (applyPlan, error) {
	q := req.Quadlet
	ns, name := q.Namespace(), q.Name()
	files := make([]string, 0, len(q.Files))
	for f := range q.Files {
		files = append(files, f)
	}
	sort.Strings(files)
	hash := q.SpecHash()

	if cur == nil {
		meta := api.WorkloadMeta{
			UID: uid, Namespace: ns, Name: name, Type: q.Workload.Spec.Type, Generation: 1, SpecHash: hash,
			Owner: req.Owner, Files: files, CreatedAt: now, UpdatedAt: now, Rollback: req.Rollback,
			PinnedNode: q.Workload.Spec.NodeSelector[NodeNameLabel],
		}
		return applyPlan{meta: meta, created: true, newSpec: true, changed: true}, nil
	}
	if req.CreateOnly {
		return applyPlan{}, fmt.Errorf("workload %s/%s: %w (use PUT to update it)", ns, name, ErrAlreadyExists)
	}
	meta := *cur
	if err := checkGitWrite(cur, req); err != nil {
		return applyPlan{}, err
	}
	if req.Resume {
		meta.Suspended = false
	}
	if cur.Owner.Kind == api.OwnerGit && req.Owner.Kind != api.OwnerGit {
		if !req.Force {
			return applyPlan{}, &OwnershipError{Namespace: ns, Name: name, Owner: cur.Owner}
		}
		meta.Suspended = true
	} else {
		meta.Owner = req.Owner
	}
	p := applyPlan{}
	if hash != cur.SpecHash {
		meta.Generation = cur.Generation + 1
		meta.SpecHash = hash
		meta.Type = q.Workload.Spec.Type
		meta.Files = files
		meta.Rollback = req.Rollback
		meta.PinnedNode = q.Workload.Spec.NodeSelector[NodeNameLabel]
		p.newSpec = true
		for _, f := range cur.Files {
			if !slices.Contains(files, f) {
				p.staleFiles = append(p.staleFiles, f)
			}
		}
		p.pruneGens = gensToPrune(archived, meta.Generation, keep)
	}
	p.changed = p.newSpec || meta.Owner != cur.Owner || meta.Suspended != cur.Suspended
	if p.changed {
		meta.UpdatedAt = now
	}
	p.meta = meta
	return p, nil
}

// checkGitWrite refuses a Git write to a workload whose Git management is
// suspended (unless it resumes it) or that another source manages.
func checkGitWrite(cur *api.WorkloadMeta, req ApplyRequest) error {
	if req.Owner.Kind != api.OwnerGit || cur.Owner.Kind != api.OwnerGit {
		return nil
	}
	if cur.Owner.Source != req.Owner.Source {
		return &OwnershipError{Namespace: cur.Namespace, Name: cur.Name, Owner: cur.Owner}
	}
	if cur.Suspended && !req.Resume {
		return fmt.Errorf("workload %s/%s: %w", cur.Namespace, cur.Name, ErrSuspended)
	}
	return nil
}

// gensToPrune returns the archived generations that fall out of the newest
// keep once newGen is added.
func gensToPrune(archived []int64, newGen int64, keep int) []int64 {
	all := append(slices.Clone(archived), newGen)
	slices.Sort(all)
	all = slices.Compact(all)
	if len(all) <= keep {
		return nil
	}
	return all[:len(all)-keep]
}

// DesiredInstances is how many instances a workload asks for: replicas for a
// Service, one for a Job (parallelism aside) or a DaemonService (per node;
// the scheduler refines it).
func DesiredInstances(q *quadlet.Quadlet) int {
	if q.Workload.Spec.Type == quadlet.TypeService && q.Workload.Spec.Replicas != nil {
		return int(*q.Workload.Spec.Replicas)
	}
	return 1
}

// ApplyWorkload writes a workload's desired state in one transaction: its
// manifests, metadata and an archive entry for a new generation. The
// generation moves only when the spec hash changes. The workload's status is
// the leader's to derive.
func (r *Repo) ApplyWorkload(ctx context.Context, req ApplyRequest) (*ApplyResult, error) {
	if req.Quadlet == nil {
		return nil, errors.New("apply workload: no quadlet")
	}
	if req.Owner.Kind == "" {
		req.Owner = api.APIOwner()
	}
	ns, name := req.Quadlet.Namespace(), req.Quadlet.Name()
	for range maxTxnAttempts {
		res, retry, err := r.applyOnce(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("apply workload %s/%s: %w", ns, name, err)
		}
		if !retry {
			return res, nil
		}
	}
	return nil, fmt.Errorf("apply workload %s/%s: %w: too many concurrent writers", ns, name, ErrConflict)
}

func (r *Repo) applyOnce(ctx context.Context, req ApplyRequest) (*ApplyResult, bool, error) {
	q := req.Quadlet
	ns, name := q.Namespace(), q.Name()
	var nsRec api.Namespace
	nsVer, err := r.getJSON(ctx, NamespaceKey(ns), &nsRec)
	if err != nil {
		return nil, false, err
	}
	if nsVer == 0 {
		return nil, false, fmt.Errorf("namespace %q: %w", ns, ErrNotFound)
	}
	var cur api.WorkloadMeta
	metaVer, err := r.getJSON(ctx, MetaKey(ns, name), &cur)
	if err != nil {
		return nil, false, err
	}
	var curPtr *api.WorkloadMeta
	if metaVer != 0 {
		curPtr = &cur
	}
	archived, err := r.archivedGenerations(ctx, ns, name)
	if err != nil {
		return nil, false, err
	}
	plan, err := planApply(curPtr, archived, req, r.archiveKeep, r.now().UTC(), r.newUID())
	if err != nil {
		return nil, false, err
	}
	res := &ApplyResult{Meta: plan.meta, Created: plan.created, Changed: plan.changed}
	if !plan.changed {
		return res, false, nil
	}
	ops, err := r.applyOps(ctx, q, plan)
	if err != nil {
		return nil, false, err
	}
	checks := []store.Compare{{Key: MetaKey(ns, name), ExpectedVersion: metaVer}, {Key: NamespaceKey(ns), ExpectedVersion: nsVer}}
	if len(req.Adopt) > 0 {
		if !req.CreateOnly {
			return nil, false, fmt.Errorf("adopt instances: %w: only as the workload is created", ErrInvalid)
		}
		adoptChecks, adoptOps, err := r.adoptWrites(ctx, q, plan.meta, req.Adopt)
		if err != nil {
			return nil, false, err
		}
		checks, ops = append(checks, adoptChecks...), append(ops, adoptOps...)
	}
	txn, err := r.st.Txn(ctx, checks, ops, nil)
	if err != nil {
		return nil, false, err
	}
	res.Revision = txn.Revision
	return res, !txn.Committed, nil
}

func (r *Repo) applyOps(ctx context.Context, q *quadlet.Quadlet, plan applyPlan) ([]store.Op, error) {
	ns, name := q.Namespace(), q.Name()
	var ops []store.Op
	if plan.newSpec {
		for _, f := range plan.meta.Files {
			ops = append(ops,
				store.Op{Type: store.OpPut, Key: ManifestKey(ns, name, f), Value: q.Files[f]},
				store.Op{Type: store.OpPut, Key: ArchiveGenerationPrefix(ns, name, plan.meta.Generation) + f, Value: q.Files[f]})
		}
		for _, f := range plan.staleFiles {
			ops = append(ops, store.Op{Type: store.OpDelete, Key: ManifestKey(ns, name, f)})
		}
		archMeta, err := putJSON(ArchiveGenerationPrefix(ns, name, plan.meta.Generation)+"meta", plan.meta)
		if err != nil {
			return nil, err
		}
		ops = append(ops, archMeta)
		for _, g := range plan.pruneGens {
			ops = append(ops, store.Op{Type: store.OpDeletePrefix, Key: ArchiveGenerationPrefix(ns, name, g)})
		}
	}
	metaOp, err := putJSON(MetaKey(ns, name), plan.meta)
	if err != nil {
		return nil, err
	}
	ops = append(ops, metaOp)
	return ops, nil
}

func (r *Repo) archivedGenerations(ctx context.Context, ns, name string) ([]int64, error) {
	kvs, err := r.st.List(ctx, ArchivePrefix(ns, name))
	if err != nil {
		return nil, err
	}
	var gens []int64
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, ArchivePrefix(ns, name))
		g, _, _ := strings.Cut(rest, "/")
		n, err := strconv.ParseInt(g, 10, 64)
		if err == nil && (len(gens) == 0 || gens[len(gens)-1] != n) {
			gens = append(gens, n)
		}
	}
	slices.Sort(gens)
	return slices.Compact(gens), nil
}

// ArchivedGenerations lists the generations of a workload kept in the archive,
// oldest first.
func (r *Repo) ArchivedGenerations(ctx context.Context, ns, name string) ([]int64, error) {
	gens, err := r.archivedGenerations(ctx, ns, name)
	if err != nil {
		return nil, fmt.Errorf("list archive of %s/%s: %w", ns, name, err)
	}
	return gens, nil
}

// ArchivedFiles returns the Quadlet files of one archived generation.
func (r *Repo) ArchivedFiles(ctx context.Context, ns, name string, gen int64) (map[string][]byte, error) {
	prefix := ArchiveGenerationPrefix(ns, name, gen)
	kvs, err := r.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("read archive %s/%s generation %d: %w", ns, name, gen, err)
	}
	files := map[string][]byte{}
	for _, kv := range kvs {
		if f := strings.TrimPrefix(kv.Key, prefix); f != "meta" {
			files[f] = kv.Value
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("archive %s/%s generation %d: %w", ns, name, gen, ErrNotFound)
	}
	return files, nil
}

// GetWorkload returns one workload's metadata and status.
func (r *Repo) GetWorkload(ctx context.Context, ns, name string) (*api.Workload, error) {
	var w api.Workload
	ver, err := r.getJSON(ctx, MetaKey(ns, name), &w.WorkloadMeta)
	if err != nil {
		return nil, fmt.Errorf("get workload %s/%s: %w", ns, name, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("workload %s/%s: %w", ns, name, ErrNotFound)
	}
	if _, err := r.getJSON(ctx, StatusKey(ns, name), &w.Status); err != nil {
		return nil, fmt.Errorf("get workload status %s/%s: %w", ns, name, err)
	}
	return &w, nil
}

// ListWorkloads returns the workloads of namespace ns, or of every namespace
// when ns is empty, sorted by namespace and name.
func (r *Repo) ListWorkloads(ctx context.Context, ns string) ([]api.Workload, error) {
	desired, status := prefixDesired, prefixStatus
	if ns != "" {
		desired, status = prefixDesired+ns+"/", prefixStatus+ns+"/"
	}
	stKVs, err := r.st.List(ctx, status)
	if err != nil {
		return nil, fmt.Errorf("list workload status: %w", err)
	}
	statuses := make(map[string][]byte, len(stKVs))
	for _, kv := range stKVs {
		statuses[strings.TrimPrefix(kv.Key, prefixStatus)] = kv.Value
	}
	// The desired state's keys are mostly manifests: scanned a page at a
	// time, only the metas are kept.
	var out []api.Workload
	if _, err := r.st.Scan(ctx, desired, func(kv store.KV) error {
		wns, name, ok := splitDesiredMeta(kv.Key)
		if !ok {
			return nil
		}
		var w api.Workload
		if err := json.Unmarshal(kv.Value, &w.WorkloadMeta); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		if b, ok := statuses[wns+"/"+name]; ok {
			if err := json.Unmarshal(b, &w.Status); err != nil {
				return fmt.Errorf("decode status of %s/%s: %w", wns, name, err)
			}
		}
		out = append(out, w)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	return out, nil
}

// GetManifest returns one Quadlet file of a workload's current desired state.
func (r *Repo) GetManifest(ctx context.Context, ns, name, file string) ([]byte, error) {
	kv, err := r.st.Get(ctx, ManifestKey(ns, name, file))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("file %q of workload %s/%s: %w", file, ns, name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get file %q of workload %s/%s: %w", file, ns, name, err)
	}
	return kv.Value, nil
}

// DeleteRequest is a request to delete a workload.
type DeleteRequest struct {
	Namespace, Name string
	// Owner is who deletes; an API delete of a Git-owned workload needs Force.
	Owner api.Owner
	Force bool
}

// DeleteWorkload removes a workload's desired state, status, archive and rollout record in one
// transaction and returns the metadata it had.
func (r *Repo) DeleteWorkload(ctx context.Context, req DeleteRequest) (*api.WorkloadMeta, error) {
	m, _, err := r.DeleteWorkloadRevision(ctx, req)
	return m, err
}

// DeleteWorkloadRevision is DeleteWorkload that also returns the store
// revision of the deletion, for a caller that then waits until a watch-fed
// copy holds it.
func (r *Repo) DeleteWorkloadRevision(ctx context.Context, req DeleteRequest) (*api.WorkloadMeta, int64, error) {
	ns, name := req.Namespace, req.Name
	if req.Owner.Kind == "" {
		req.Owner = api.APIOwner()
	}
	for range maxTxnAttempts {
		var cur api.WorkloadMeta
		ver, err := r.getJSON(ctx, MetaKey(ns, name), &cur)
		if err != nil {
			return nil, 0, fmt.Errorf("delete workload %s/%s: %w", ns, name, err)
		}
		if ver == 0 {
			return nil, 0, fmt.Errorf("workload %s/%s: %w", ns, name, ErrNotFound)
		}
		if cur.Owner.Kind == api.OwnerGit && req.Owner.Kind != api.OwnerGit && !req.Force {
			return nil, 0, fmt.Errorf("delete workload %s/%s: %w", ns, name, &OwnershipError{Namespace: ns, Name: name, Owner: cur.Owner})
		}
		if req.Owner.Kind == api.OwnerGit && (cur.Owner.Kind != api.OwnerGit || cur.Owner.Source != req.Owner.Source) {
			return nil, 0, fmt.Errorf("prune workload %s/%s: %w", ns, name, &OwnershipError{Namespace: ns, Name: name, Owner: cur.Owner})
		}
		if req.Owner.Kind == api.OwnerGit && cur.Suspended {
			return nil, 0, fmt.Errorf("prune workload %s/%s: %w", ns, name, ErrSuspended)
		}
		txn, err := r.st.Txn(ctx,
			[]store.Compare{{Key: MetaKey(ns, name), ExpectedVersion: ver}},
			[]store.Op{
				{Type: store.OpDeletePrefix, Key: DesiredPrefix(ns, name)},
				{Type: store.OpDelete, Key: StatusKey(ns, name)},
				{Type: store.OpDeletePrefix, Key: ArchivePrefix(ns, name)},
				{Type: store.OpDeletePrefix, Key: JobPrefix(ns, name)},
				{Type: store.OpDelete, Key: DaemonRolloutKey(ns, name)},
				{Type: store.OpDelete, Key: RolloutKey(ns, name)},
			}, nil)
		if err != nil {
			return nil, 0, fmt.Errorf("delete workload %s/%s: %w", ns, name, err)
		}
		if txn.Committed {
			return &cur, txn.Revision, nil
		}
	}
	return nil, 0, fmt.Errorf("delete workload %s/%s: %w: too many concurrent writers", ns, name, ErrConflict)
}

// ListWorkloadMetas returns the metadata of every workload, without status:
// cheaper than ListWorkloads for callers that only need owners and hashes.
func (r *Repo) ListWorkloadMetas(ctx context.Context) ([]api.WorkloadMeta, error) {
	kvs, err := r.st.List(ctx, prefixDesired)
	if err != nil {
		return nil, fmt.Errorf("list workloads: %w", err)
	}
	var out []api.WorkloadMeta
	for _, kv := range kvs {
		if _, _, ok := splitDesiredMeta(kv.Key); !ok {
			continue
		}
		var m api.WorkloadMeta
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// WriteWorkloadStatus writes the status of workload ns/name when the
// workload's meta is still at metaVersion and its status at statusVersion (0:
// none yet), and reports whether it wrote. The leader's status loop is the
// only writer of workload statuses; the checks keep a status from outliving
// its workload's deletion and from overwriting a newer derivation. It also
// returns the store revision after the attempt.
func (r *Repo) WriteWorkloadStatus(ctx context.Context, ns, name string, st api.WorkloadStatus, metaVersion, statusVersion int64) (bool, int64, error) {
	op, err := putJSON(StatusKey(ns, name), st)
	if err != nil {
		return false, 0, err
	}
	res, err := r.st.Txn(ctx, []store.Compare{
		{Key: MetaKey(ns, name), ExpectedVersion: metaVersion},
		{Key: StatusKey(ns, name), ExpectedVersion: statusVersion},
	}, []store.Op{op}, nil)
	if err != nil {
		return false, 0, fmt.Errorf("write status of %s/%s: %w", ns, name, err)
	}
	return res.Committed, res.Revision, nil
}
