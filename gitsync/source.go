package gitsync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// Timeouts of remote operations.
const (
	listTimeout  = 30 * time.Second
	fetchTimeout = 5 * time.Minute
	// repackEvery is how many fetches may add packs before a repack.
	repackEvery = 50
	// applyChunk is how many workloads are written (several to a
	// transaction) between two checks for a newer commit.
	applyChunk = 100
	// fullResyncInterval is how often every directory is compared with etcd
	// by spec hash even when the branch did not move, so that a change made
	// behind Git's back (a forced delete, a lost write) is put right.
	fullResyncInterval = 10 * time.Minute
)

// Condition types and reasons of a source.
const (
	CondReady            = "Ready"
	CondStalled          = "Stalled"
	ReasonApplied        = "Applied"
	ReasonPathErrors     = "PathErrors"
	ReasonFetchFailed    = "FetchFailed"
	ReasonSignature      = "SignatureInvalid"
	ReasonPruneRefused   = "PruneRefused"
	ReasonInvalidQuadlet = "InvalidQuadlet"
	ReasonApplyFailed    = "ApplyFailed"
)

// errSuperseded stops an apply when a newer commit has arrived.
var errSuperseded = errors.New("gitsync: superseded by a newer commit")

// source is one source's loop. Its goroutine owns the clone and the status.
type source struct {
	spec    api.SourceSpec
	repo    *resources.Repo
	desired *resources.DesiredIndex
	secrets *SecretKeys // nil: secret files cannot be applied
	dir     string
	log     zerolog.Logger
	now     func() time.Time
	trigger chan struct{} // one slot: bursts of triggers coalesce

	mu   sync.Mutex
	full bool // the next apply compares every directory
	// after is a revision of the desired state the next apply's index must
	// hold: a write by another (a resumption) the apply must see.
	after int64

	// Owned by the loop goroutine.
	git *gitRepo
	// local is set when git is a file:// source's repository read in place
	// (openLocal); localSeen is the branch head it last read.
	local        bool
	localSeen    plumbing.Hash
	status       api.SourceStatus
	listings     map[string]Listing // commit -> listing, the last applied one
	fetches      int
	lastFull     time.Time // zero: the first sync compares everything
	lastRefused  string
	lastWarnings string
	// lastWrite is the store revision of the loop's last write of desired
	// state: the index must hold it before the loop decides again.
	lastWrite int64
}

func newSource(spec api.SourceSpec, repo *resources.Repo, desired *resources.DesiredIndex, dir string, log zerolog.Logger, now func() time.Time) *source {
	return &source{
		spec: spec, repo: repo, desired: desired, dir: dir, now: now, trigger: make(chan struct{}, 1),
		log:      log.With().Str("source", spec.Name).Logger(),
		listings: map[string]Listing{},
	}
}

// Trigger asks for a poll now; it never blocks.
func (s *source) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// fullNext makes the next apply compare every directory by spec hash, once
// the desired-state index holds revision after (none: nothing to wait for).
func (s *source) fullNext(after ...int64) {
	s.mu.Lock()
	s.full = true
	for _, rev := range after {
		s.after = max(s.after, rev)
	}
	s.mu.Unlock()
}

// waitIndex waits until the desired-state index holds every write of this
// loop and the revision fullNext was given.
func (s *source) waitIndex(ctx context.Context) error {
	s.mu.Lock()
	rev := max(s.after, s.lastWrite)
	s.mu.Unlock()
	return s.desired.WaitRevision(ctx, rev)
}

func (s *source) takeFull() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.full
	s.full = false
	return f
}

// run polls, and syncs when a watched file changes (watch), until ctx
// ends.
func (s *source) run(ctx context.Context) {
	wctx, cancel := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		s.watch(wctx)
	}()
	defer func() { cancel(); <-watching }()
	if src, err := s.repo.GetSource(ctx, s.spec.Name); err == nil {
		s.status = src.Status
	}
	defer func() {
		if s.git != nil {
			_ = s.git.Close()
		}
	}()
	interval := time.Duration(s.spec.IntervalSeconds) * time.Second
	for {
		s.round(ctx)
		// Jitter of up to a tenth of the interval spreads sources out.
		wait := interval + rand.N(interval/10+1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.trigger:
		case <-t.C:
		}
		t.Stop()
	}
}

// round is one poll: compare heads, fetch when moved, apply.
func (s *source) round(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	err := s.sync(ctx)
	if err == nil {
		metrics.GitSynced(s.spec.Name, metrics.ResultSuccess, start)
	}
	if err == nil || ctx.Err() != nil {
		return
	}
	// Whatever failed may have left part of a commit written: the next
	// apply compares every directory rather than trust the applied commit.
	s.fullNext()
	if errors.Is(err, errSuperseded) {
		metrics.GitSynced(s.spec.Name, metrics.ResultSuperseded, start)
		s.Trigger()
		return
	}
	metrics.GitSynced(s.spec.Name, metrics.ResultFailure, start)
	msg := gitx.NewRedactor(s.spec.URL).String(err.Error())
	s.log.Warn().Str("error", msg).Msg("sync failed")
	s.status.LastError = msg
	s.setCondition(CondReady, api.ConditionFalse, reasonOf(err), msg)
	s.writeStatus(ctx)
}

// syncError carries a condition reason.
type syncError struct {
	reason string
	err    error
}

func (e *syncError) Error() string { return e.err.Error() }
func (e *syncError) Unwrap() error { return e.err }

func reasonOf(err error) string {
	var se *syncError
	if errors.As(err, &se) {
		return se.reason
	}
	return ReasonApplyFailed
}

func (s *source) sync(ctx context.Context) error {
	start := time.Now()
	head, err := s.advance(ctx)
	metrics.GitFetched(s.spec.Name, start, err)
	if err != nil {
		return err
	}
	s.status.LastFetchTime = s.now().UTC()
	full := s.takeFull() || s.now().Sub(s.lastFull) >= fullResyncInterval
	if head.String() == s.status.AppliedCommit && !full {
		if s.status.LastError != "" && s.lastRefused == "" {
			// The remote is back and nothing moved: clear the fetch error.
			s.status.LastError = ""
			s.setReady()
		}
		s.writeStatus(ctx)
		return nil
	}
	s.status.FetchedCommit = head.String()
	commit, err := s.git.Git.CommitObject(head)
	if err != nil && s.local {
		return &syncError{ReasonFetchFailed, fmt.Errorf("read commit %s of %s: %w", api.ShortCommit(head.String()), gitx.RedactURL(s.spec.URL), err)}
	}
	if err != nil {
		// The clone lost the object it just fetched: start it again.
		s.log.Warn().Err(err).Msg("clone is damaged; cloning again")
		if err := s.reclone(ctx); err != nil {
			return err
		}
		if commit, err = s.git.Git.CommitObject(head); err != nil {
			return fmt.Errorf("read commit %s: %w", api.ShortCommit(head.String()), err)
		}
		full = true
	}
	if err := s.verify(commit); err != nil {
		s.status.LastAttemptedCommit = head.String()
		s.fullNext()
		return err
	}
	err = s.apply(ctx, commit, full)
	if errors.Is(err, plumbing.ErrObjectNotFound) && s.local {
		s.git.Refresh()
		err = s.apply(ctx, commit, true)
	} else if errors.Is(err, plumbing.ErrObjectNotFound) {
		s.log.Warn().Err(err).Msg("clone is missing objects; cloning again")
		if err := s.reclone(ctx); err != nil {
			return err
		}
		err = s.apply(ctx, commit, true)
	}
	if err == nil && s.fetches >= repackEvery {
		// After the apply, so that the commit does not wait for it.
		s.fetches = 0
		if err := s.git.repack(); err != nil {
			s.log.Warn().Err(err).Msg("repack clone")
		}
	}
	return err
}

// advance brings the source's repository to its branch head and returns
// the head. A clone fetches: the fetch's ref advertisement is the cheap
// comparison with the remote (like git ls-remote), and nothing else is
// transferred when the branch did not move. A file:// source is read in
// place (openLocal).
func (s *source) advance(ctx context.Context) (plumbing.Hash, error) {
	if s.git == nil {
		if dir := localRepoDir(s.spec.URL); dir != "" {
			g, err := openLocal(dir, s.spec.URL, s.spec.Branch)
			if err != nil {
				return plumbing.ZeroHash, &syncError{ReasonFetchFailed, err}
			}
			s.git, s.local = g, true
		} else {
			g, err := openRepo(s.dir, s.spec.URL, s.spec.Branch, s.spec.Auth)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			s.git = g
		}
	}
	if s.local {
		head, err := s.git.branchHead()
		if err != nil {
			return head, &syncError{ReasonFetchFailed, err}
		}
		if head != s.localSeen {
			// Loose objects of a push are read at once; a new pack once
			// the repository is refreshed.
			if _, err := s.git.Git.CommitObject(head); errors.Is(err, plumbing.ErrObjectNotFound) {
				s.git.Refresh()
			}
			s.localSeen = head
		}
		return head, nil
	}
	before := s.git.localHead()
	fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	head, err := s.git.fetch(fctx)
	cancel()
	if err != nil {
		return head, &syncError{ReasonFetchFailed, err}
	}
	if head != before {
		s.fetches++
	}
	return head, nil
}

func (s *source) reclone(ctx context.Context) error {
	if err := s.git.Reset(); err != nil {
		s.git = nil // closed: the next sync opens it again
		return err
	}
	s.listings = map[string]Listing{}
	fctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	if _, err := s.git.fetch(fctx); err != nil {
		return &syncError{ReasonFetchFailed, err}
	}
	return nil
}

// verify checks the commit's signature against the source's keyring.
func (s *source) verify(c *object.Commit) error {
	if s.spec.KeyringFile == "" {
		return nil
	}
	ring, err := os.ReadFile(s.spec.KeyringFile)
	if err != nil {
		return &syncError{ReasonSignature, fmt.Errorf("read keyring: %w", err)}
	}
	if c.PGPSignature == "" {
		return &syncError{ReasonSignature, fmt.Errorf("commit %s is not signed; the source requires a signature by a key in %s", api.ShortCommit(c.Hash.String()), s.spec.KeyringFile)}
	}
	if _, err := c.Verify(string(ring)); err != nil {
		return &syncError{ReasonSignature, fmt.Errorf("commit %s is not signed by a trusted key (%s): %w", api.ShortCommit(c.Hash.String()), s.spec.KeyringFile, err)}
	}
	return nil
}

// previous returns the listing of the last applied commit, or nil when it
// is unknown.
func (s *source) previous() *Listing {
	applied := s.status.AppliedCommit
	if applied == "" {
		return nil
	}
	if l, ok := s.listings[applied]; ok {
		return &l
	}
	c, err := s.git.Git.CommitObject(plumbing.NewHash(applied))
	if err != nil {
		return nil // force-pushed away, or a new clone
	}
	l, err := s.git.listTree(c, s.spec.Path, nil)
	if err != nil {
		return nil
	}
	return &l
}

func (s *source) apply(ctx context.Context, c *object.Commit, full bool) error {
	commit := c.Hash.String()
	var prev *Listing
	if !full {
		prev = s.previous()
	}
	hadSecrets := prev == nil || len(prev.Secrets) > 0 // listChanges consumes prev
	// The listing is brought to this commit in place: until the commit is
	// applied, no listing is known.
	s.listings = map[string]Listing{}
	next, diff, err := s.git.listChanges(c, s.spec.Path, prev)
	if err != nil {
		s.status.LastAttemptedCommit = commit
		return &syncError{ReasonApplyFailed, err}
	}
	ch := Changes{Dirs: diff.dirs, Namespaces: diff.namespaces, Secrets: diff.secrets} // ChangedPaths(prev, next), found while listing
	if prev == nil {
		ch = ChangedPaths(nil, next)
	}
	ch = WithRetries(ch, next, s.status.PathErrors)
	in := DecideInput{
		Source: s.spec.Name, Commit: commit, Full: prev == nil, AllowPruneAll: s.spec.AllowPruneAll,
		Listing: next, Parsed: map[string]ParsedDir{}, Namespaces: map[string]ParsedNamespace{},
		PrevErrors: s.status.PathErrors,
	}
	// An object that cannot be read fails the commit, to be read again; what
	// an object holds is its path's error.
	readFailed := func(path string, err error) error {
		s.status.LastAttemptedCommit = commit
		return &syncError{ReasonApplyFailed, fmt.Errorf("read %s: %w", path, err)}
	}
	for _, p := range ch.Namespaces {
		data, err := s.git.readBlob(plumbing.NewHash(next.Namespaces[p]), quadlet.DefaultLimits.MaxFileBytes)
		if errors.Is(err, errRead) {
			return readFailed(p, err)
		}
		if err != nil {
			in.Namespaces[p] = ParsedNamespace{Err: err}
			continue
		}
		ns, err := quadlet.ParseNamespace(quadlet.NamespaceFile, data)
		in.Namespaces[p] = ParsedNamespace{Namespace: ns, Err: err}
	}
	if hadSecrets || len(next.Secrets) > 0 {
		if in.CurrentSecrets, err = s.repo.ListSecrets(ctx, ""); err != nil {
			s.status.LastAttemptedCommit = commit
			return &syncError{ReasonApplyFailed, err}
		}
		in.Secrets = s.openSecrets(ch.Secrets, next, in.CurrentSecrets)
		for p, ps := range in.Secrets {
			if errors.Is(ps.Err, errRead) {
				return readFailed(p, ps.Err)
			}
		}
	}
	for _, p := range ch.Dirs {
		files, err := s.git.readDir(next.Dirs[p])
		if errors.Is(err, errRead) {
			return readFailed(p, err)
		}
		if err != nil {
			in.Parsed[p] = ParsedDir{Err: err}
			continue
		}
		q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
		in.Parsed[p] = ParsedDir{Quadlet: q, Err: err}
	}
	// Decide from an index that holds everything this loop wrote.
	select {
	case <-s.desired.Synced():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := s.waitIndex(ctx); err != nil {
		return err
	}
	in.Current, in.Owned = s.current(in, diff.removed), s.desired.Owned(s.spec.Name)
	plan := Decide(in)
	// The plan holds what is written; execute lets each part go once
	// written, so a commit of every directory holds few parsed at once.
	in.Parsed, in.Current = nil, nil
	s.status.LastAttemptedCommit = commit
	if plan.Refused != "" {
		if s.lastRefused != commit {
			s.lastRefused = commit
			s.event(ctx, api.EventWarning, ReasonPruneRefused, plan.Refused)
		}
		s.setCondition(CondStalled, api.ConditionTrue, ReasonPruneRefused, plan.Refused)
		s.fullNext()
		return &syncError{ReasonPruneRefused, errors.New(plan.Refused)}
	}
	s.lastRefused = ""
	s.writeStatus(ctx) // record the attempt: an interruption forces a full compare
	res, err := s.execute(ctx, commit, plan)
	if err != nil {
		return err
	}
	if err := s.waitIndex(ctx); err != nil {
		return err
	}
	res.owned = s.desired.Owned(s.spec.Name)
	s.listings = map[string]Listing{commit: next}
	if in.Full {
		s.lastFull = s.now()
	}
	s.status.AppliedCommit = commit
	s.status.LastAppliedTime = s.now().UTC()
	s.status.LastError = ""
	s.status.PathErrors = res.pathErrors
	s.status.Workloads = res.owned
	s.removeCondition(CondStalled)
	s.setReady()
	s.writeStatus(ctx)
	if msg := res.summary(commit); msg != "" {
		s.event(ctx, api.EventNormal, ReasonApplied, msg)
		s.log.Info().Str("commit", commit).Int("changed", len(res.changed)).Int("deleted", len(res.deleted)).
			Int("path_errors", len(res.pathErrors)).Msg("applied commit")
	}
	if w := pathErrorSummary(res.pathErrors); w != "" && w != s.lastWarnings {
		s.event(ctx, api.EventWarning, ReasonInvalidQuadlet, fmt.Sprintf("commit %s: %s", api.ShortCommit(commit), w))
	}
	s.lastWarnings = pathErrorSummary(res.pathErrors)
	return nil
}

// current returns the metas Decide needs, from the desired-state index: on a
// full compare every workload's; else those of the workloads the parsed
// directories define, and this source's workloads whose directory was parsed
// or is gone since the last applied commit (removed): after an apply, the
// source owns no workload outside its listing but those suspended, so only
// those can be pruned (a drift behind Git's back waits for the full compare
// of fullResyncInterval).
func (s *source) current(in DecideInput, removed []string) []api.WorkloadMeta {
	if in.Full {
		return s.desired.Metas()
	}
	seen := map[string]bool{}
	var out []api.WorkloadMeta
	add := func(ms ...api.WorkloadMeta) {
		for _, m := range ms {
			if k := m.Namespace + "/" + m.Name; !seen[k] {
				seen[k] = true
				out = append(out, m)
			}
		}
	}
	for path, pd := range in.Parsed {
		if pd.Quadlet != nil {
			if m, ok := s.desired.Meta(pd.Quadlet.Namespace(), pd.Quadlet.Name()); ok {
				add(m)
			}
		}
		add(s.desired.OwnedAt(s.spec.Name, path)...)
	}
	for _, path := range removed {
		add(s.desired.OwnedAt(s.spec.Name, path)...)
	}
	return out
}

// applyResult is what execute wrote.
type applyResult struct {
	changed, deleted []string
	pathErrors       []api.PathError
	owned            int
}

func (r applyResult) summary(commit string) string {
	if len(r.changed)+len(r.deleted) == 0 {
		return ""
	}
	var parts []string
	if len(r.changed) > 0 {
		parts = append(parts, "applied "+capList(r.changed))
	}
	if len(r.deleted) > 0 {
		parts = append(parts, "pruned "+capList(r.deleted))
	}
	return fmt.Sprintf("commit %s: %s", api.ShortCommit(commit), strings.Join(parts, "; "))
}

func capList(xs []string) string {
	const maxListed = 20
	if len(xs) <= maxListed {
		return strings.Join(xs, ", ")
	}
	return strings.Join(xs[:maxListed], ", ") + fmt.Sprintf(" and %d more", len(xs)-maxListed)
}

func pathErrorSummary(errs []api.PathError) string {
	if len(errs) == 0 {
		return ""
	}
	paths := make([]string, 0, len(errs))
	for _, e := range errs {
		paths = append(paths, e.Path)
	}
	return fmt.Sprintf("%d path(s) have errors: %s", len(errs), capList(paths))
}

// execute writes a plan. Errors of one item become path errors; a store
// error or a newer commit stops it. It drops each Apply's Quadlet once
// written.
func (s *source) execute(ctx context.Context, commit string, plan Plan) (applyResult, error) {
	var res applyResult
	pathErrs := slices.Clone(plan.PathErrors)
	addErr := func(path string, err error) {
		pathErrs = append(pathErrs, api.PathError{Path: path, Error: path + ": " + err.Error(), Commit: commit})
	}
	for _, ns := range plan.Namespaces {
		if _, _, err := s.repo.PutNamespace(ctx, ns.Metadata.Name, ns.Metadata.Labels); err != nil {
			return res, fmt.Errorf("write namespace %s: %w", ns.Metadata.Name, err)
		}
	}
	for start := 0; start < len(plan.Apply); start += applyChunk {
		if start > 0 && s.superseded(ctx, commit) {
			return res, errSuperseded
		}
		chunk := plan.Apply[start:min(len(plan.Apply), start+applyChunk)]
		reqs := make([]resources.ApplyRequest, len(chunk))
		for i, a := range chunk {
			reqs[i] = resources.ApplyRequest{
				Quadlet: a.Quadlet,
				Owner:   api.Owner{Kind: api.OwnerGit, Source: s.spec.Name, Path: a.Path, Commit: commit},
			}
		}
		outs, err := s.repo.ApplyWorkloads(ctx, reqs)
		if err != nil {
			return res, err
		}
		clear(reqs)
		for i, a := range chunk {
			if r := outs[i].Result; r != nil {
				s.lastWrite = max(s.lastWrite, r.Revision)
			}
			switch err := outs[i].Err; {
			case err == nil:
				res.changed = append(res.changed, a.Quadlet.Namespace()+"/"+a.Quadlet.Name())
			case errors.Is(err, resources.ErrSuspended):
			case errors.Is(err, resources.ErrNotFound):
				addErr(a.Path, fmt.Errorf("namespace %q does not exist: add a %s defining it", a.Quadlet.Namespace(), quadlet.NamespaceFile))
			case errors.Is(err, resources.ErrConflict):
				addErr(a.Path, err)
			default:
				return res, err
			}
			chunk[i].Quadlet = nil // written: nothing needs it any more
		}
	}
	if err := s.executeSecrets(ctx, commit, plan, &res, addErr); err != nil {
		return res, err
	}
	for _, d := range plan.Delete {
		_, rev, err := s.repo.DeleteWorkloadRevision(ctx, resources.DeleteRequest{
			Namespace: d.Namespace, Name: d.Name, Owner: api.Owner{Kind: api.OwnerGit, Source: s.spec.Name},
		})
		s.lastWrite = max(s.lastWrite, rev)
		switch {
		case err == nil:
			res.deleted = append(res.deleted, d.String())
		case errors.Is(err, resources.ErrNotFound), errors.Is(err, resources.ErrSuspended), errors.Is(err, resources.ErrConflict):
		default:
			return res, err
		}
	}
	slices.SortFunc(pathErrs, func(a, b api.PathError) int { return strings.Compare(a.Path, b.Path) })
	res.pathErrors = pathErrs
	return res, nil
}

// superseded reports whether a trigger is pending and the remote head has
// moved past commit.
func (s *source) superseded(ctx context.Context, commit string) bool {
	if len(s.trigger) == 0 {
		return false
	}
	if s.local {
		head, err := s.git.branchHead()
		return err == nil && head.String() != commit
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	head, err := s.git.remoteHead(lctx)
	return err == nil && head.String() != commit
}

func (s *source) setReady() {
	if n := len(s.status.PathErrors); n > 0 {
		s.setCondition(CondReady, api.ConditionFalse, ReasonPathErrors,
			fmt.Sprintf("applied commit %s; %s", api.ShortCommit(s.status.AppliedCommit), pathErrorSummary(s.status.PathErrors)))
		return
	}
	s.setCondition(CondReady, api.ConditionTrue, ReasonApplied, "applied commit "+api.ShortCommit(s.status.AppliedCommit))
}

func (s *source) setCondition(typ, status, reason, msg string) {
	now := s.now().UTC()
	for i, c := range s.status.Conditions {
		if c.Type == typ {
			if c.Status != status {
				c.LastTransitionTime = now
			}
			c.Status, c.Reason, c.Message = status, reason, msg
			s.status.Conditions[i] = c
			return
		}
	}
	s.status.Conditions = append(s.status.Conditions, api.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: now})
}

func (s *source) removeCondition(typ string) {
	s.status.Conditions = slices.DeleteFunc(s.status.Conditions, func(c api.Condition) bool { return c.Type == typ })
}

func (s *source) writeStatus(ctx context.Context) {
	if err := s.repo.PutSourceStatus(ctx, s.spec.Name, s.status); err != nil && ctx.Err() == nil {
		s.log.Warn().Err(err).Msg("write source status")
	}
}

func (s *source) event(ctx context.Context, typ, reason, msg string) {
	if err := s.repo.AppendEvent(ctx, api.Event{Type: typ, Object: "source/" + s.spec.Name, Reason: reason, Message: msg}); err != nil && ctx.Err() == nil {
		s.log.Warn().Err(err).Msg("record event")
	}
}
