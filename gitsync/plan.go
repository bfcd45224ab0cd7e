package gitsync

import (
	"errors"
	"fmt"
	"maps"
	pathpkg "path"
	"slices"
	"sort"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// Listing is what one commit holds under a source's path: every workload
// directory, namespace.kat file and secret file (*.sops.yaml outside
// workload directories), by repository-relative path, with the hash of its
// Git tree or blob. Equal hashes mean equal content.
type Listing struct {
	Dirs       map[string]string
	Namespaces map[string]string
	Secrets    map[string]string
	// Trees holds the other directories walked, so that an unchanged
	// subtree of a later commit can be kept rather than read.
	Trees map[string]string
	// raw holds the content of the trees in Trees, so that a changed tree
	// of a later commit is compared entry by entry.
	raw map[string][]byte
}

// Changes are the paths of a new commit that must be read and parsed.
type Changes struct {
	Dirs       []string
	Namespaces []string
	Secrets    []string
}

// ChangedPaths returns the directories and namespace files of next that are
// new or differ from prev. A nil prev (the last applied commit is unknown)
// returns everything.
func ChangedPaths(prev *Listing, next Listing) Changes {
	var c Changes
	for p, h := range next.Dirs {
		if prev == nil || prev.Dirs[p] != h {
			c.Dirs = append(c.Dirs, p)
		}
	}
	for p, h := range next.Namespaces {
		if prev == nil || prev.Namespaces[p] != h {
			c.Namespaces = append(c.Namespaces, p)
		}
	}
	for p, h := range next.Secrets {
		if prev == nil || prev.Secrets[p] != h {
			c.Secrets = append(c.Secrets, p)
		}
	}
	slices.Sort(c.Dirs)
	slices.Sort(c.Namespaces)
	slices.Sort(c.Secrets)
	return c
}

// ParsedDir is a workload directory read from the new commit: its parsed
// Quadlet, or why it could not be read or parsed.
type ParsedDir struct {
	Quadlet *quadlet.Quadlet
	Err     error
}

// ParsedNamespace is a namespace.kat read from the new commit.
type ParsedNamespace struct {
	Namespace *quadlet.Namespace
	Err       error
}

// ParsedSecret is a secret file read from the new commit, decrypted and
// parsed, or why it could not be.
type ParsedSecret struct {
	Secret *quadlet.Secret
	// Blob is the file's Git blob; Recipient the age recipient that opened
	// it.
	Blob, Recipient string
	Err             error
}

// DecideInput is everything Decide needs.
type DecideInput struct {
	Source string
	Commit string
	// Full is true when every directory was parsed (the previous commit is
	// unknown): unchanged workloads are then skipped by spec hash.
	Full bool
	// AllowPruneAll lets the commit delete every workload of the source.
	AllowPruneAll bool
	// Listing is the new commit's listing.
	Listing Listing
	// Parsed holds the directories (and Namespaces the namespace files)
	// that changed.
	Parsed     map[string]ParsedDir
	Namespaces map[string]ParsedNamespace
	// Current is the metadata of the workloads in etcd the commit may
	// touch: at least those the parsed directories define and those the
	// source owns whose directory is parsed or no longer listed; on a full
	// compare, every workload.
	Current []api.WorkloadMeta
	// Owned is how many workloads the source owns in all; 0: count them in
	// Current, which then holds every workload.
	Owned int
	// PrevErrors are the source's path errors at the last applied commit.
	PrevErrors []api.PathError
	// Secrets holds the secret files that changed (unchanged ones are not
	// decrypted again), and CurrentSecrets every secret in etcd when the
	// listing or the last applied commit has a secret file.
	Secrets        map[string]ParsedSecret
	CurrentSecrets []api.SecretInfo
}

// WorkloadRef names a workload and the directory it comes from.
type WorkloadRef struct {
	Namespace, Name, Path string
}

func (w WorkloadRef) String() string { return w.Namespace + "/" + w.Name }

// Apply is one workload to write.
type Apply struct {
	Path    string
	Quadlet *quadlet.Quadlet
}

// SecretApply is one secret to write.
type SecretApply struct {
	Path            string
	Secret          *quadlet.Secret
	Blob, Recipient string
}

// Plan is what one commit changes.
type Plan struct {
	Namespaces []*quadlet.Namespace
	Apply      []Apply
	Delete     []WorkloadRef
	// ApplySecrets and DeleteSecrets are the secrets to write and those
	// whose file is gone.
	ApplySecrets  []SecretApply
	DeleteSecrets []WorkloadRef
	// PathErrors are the source's path errors once the plan is written
	// (before write failures are added).
	PathErrors []api.PathError
	// Unchanged counts parsed directories whose workload is already as
	// desired; Suspended those left alone because Git management is
	// suspended.
	Unchanged int
	Suspended []WorkloadRef
	// Refused is set when the commit must not be applied at all.
	Refused string
}

// Decide turns a new commit's listing and parsed changes plus the current
// desired state into a plan. It is pure.
func Decide(in DecideInput) Plan {
	var p Plan
	key := func(ns, name string) string { return ns + "/" + name }
	current := map[string]api.WorkloadMeta{}
	byPath := map[string][]api.WorkloadMeta{} // this source's workloads by directory
	owned := 0
	for _, m := range in.Current {
		current[key(m.Namespace, m.Name)] = m
		if m.Owner.Kind == api.OwnerGit && m.Owner.Source == in.Source {
			byPath[m.Owner.Path] = append(byPath[m.Owner.Path], m)
			owned++
		}
	}
	if in.Owned > 0 {
		owned = in.Owned
	}
	errs := map[string]api.PathError{}
	for _, e := range in.PrevErrors { // errors of paths that did not change stay
		_, dir := in.Listing.Dirs[e.Path]
		_, ns := in.Listing.Namespaces[e.Path]
		_, secret := in.Listing.Secrets[e.Path]
		if dir || ns || secret {
			errs[e.Path] = e
		}
	}

	for _, path := range slices.Sorted(maps.Keys(in.Namespaces)) {
		pn := in.Namespaces[path]
		delete(errs, path)
		if pn.Err != nil {
			errs[path] = api.PathError{Path: path, Error: describe(pathpkg.Dir(path), pn.Err), Commit: in.Commit}
			continue
		}
		p.Namespaces = append(p.Namespaces, pn.Namespace)
	}

	claimed := map[string]string{} // ns/name -> path, in this commit
	created := 0
	for _, path := range slices.Sorted(maps.Keys(in.Parsed)) {
		pd := in.Parsed[path]
		delete(errs, path)
		fail := func(msg string) {
			errs[path] = api.PathError{Path: path, Error: msg, Commit: in.Commit}
		}
		if pd.Err != nil {
			fail(describe(path, pd.Err))
			continue
		}
		q := pd.Quadlet
		k := key(q.Namespace(), q.Name())
		if other, dup := claimed[k]; dup {
			fail(fmt.Sprintf("%s: workload %s is already defined by %s", path, k, other))
			continue
		}
		claimed[k] = path
		ref := WorkloadRef{q.Namespace(), q.Name(), path}
		cur, exists := current[k]
		switch {
		case exists && cur.Owner.Kind == api.OwnerGit && cur.Owner.Source != in.Source:
			fail(fmt.Sprintf("%s: workload %s is managed by %s", path, k, cur.Owner))
			continue
		case exists && cur.Owner.Kind == api.OwnerGit && cur.Owner.Path != path && stillDefines(in, cur.Owner.Path):
			fail(fmt.Sprintf("%s: workload %s is already defined by %s", path, k, cur.Owner.Path))
			continue
		case exists && cur.Owner.Kind == api.OwnerGit && cur.Suspended:
			p.Suspended = append(p.Suspended, ref)
		case exists && cur.SpecHash == q.SpecHash() && cur.Owner.Kind == api.OwnerGit && cur.Owner.Path == path:
			p.Unchanged++
		default:
			p.Apply = append(p.Apply, Apply{Path: path, Quadlet: q})
			if !exists || cur.Owner.Kind != api.OwnerGit || cur.Owner.Source != in.Source {
				created++
			}
		}
	}

	// Prune: this source's workloads whose directory is gone, or whose
	// directory now defines a different workload.
	for _, path := range slices.Sorted(maps.Keys(byPath)) {
		_, listed := in.Listing.Dirs[path]
		pd, parsed := in.Parsed[path]
		for _, m := range byPath[path] {
			renamed := listed && parsed && pd.Err == nil && key(pd.Quadlet.Namespace(), pd.Quadlet.Name()) != key(m.Namespace, m.Name)
			// A workload another directory defines in this commit moved
			// there: it is not pruned.
			if (listed && !renamed) || claimed[key(m.Namespace, m.Name)] != "" {
				continue
			}
			ref := WorkloadRef{m.Namespace, m.Name, path}
			if m.Suspended {
				p.Suspended = append(p.Suspended, ref)
				continue
			}
			p.Delete = append(p.Delete, ref)
		}
	}
	if len(p.Delete) > 0 && len(p.Delete) == owned && created == 0 && !in.AllowPruneAll {
		p = Plan{Refused: fmt.Sprintf("commit %s would delete all %d workloads of source %q; refusing (set allowPruneAll on the source to permit it)",
			api.ShortCommit(in.Commit), owned, in.Source)}
		p.PathErrors = slices.Clone(in.PrevErrors)
		return p
	}
	decideSecrets(in, &p, errs)
	for _, path := range slices.Sorted(maps.Keys(errs)) {
		p.PathErrors = append(p.PathErrors, errs[path])
	}
	return p
}

// decideSecrets adds to p the secrets to write and to prune, and to errs the
// secret files that cannot be applied. A file that fails keeps its secret's
// last good version.
func decideSecrets(in DecideInput, p *Plan, errs map[string]api.PathError) {
	current := map[string]api.SecretInfo{}
	for _, s := range in.CurrentSecrets {
		current[s.Namespace+"/"+s.Name] = s
	}
	claimed := map[string]string{}
	for _, path := range slices.Sorted(maps.Keys(in.Secrets)) {
		ps := in.Secrets[path]
		delete(errs, path)
		fail := func(msg string) { errs[path] = api.PathError{Path: path, Error: msg, Commit: in.Commit} }
		if ps.Err != nil {
			fail(describeSecret(path, ps.Err))
			continue
		}
		k := ps.Secret.Namespace() + "/" + ps.Secret.Name()
		if other, dup := claimed[k]; dup {
			fail(fmt.Sprintf("%s: secret %s is already defined by %s", path, k, other))
			continue
		}
		claimed[k] = path
		cur, exists := current[k]
		own := exists && cur.Owner.Kind == api.OwnerGit
		switch {
		case own && cur.Owner.Source != in.Source:
			fail(fmt.Sprintf("%s: secret %s is managed by %s", path, k, cur.Owner))
			continue
		case own && cur.Owner.Path != path && secretStillDefined(in, cur.Owner.Path):
			fail(fmt.Sprintf("%s: secret %s is already defined by %s", path, k, cur.Owner.Path))
			continue
		}
		p.ApplySecrets = append(p.ApplySecrets, SecretApply{Path: path, Secret: ps.Secret, Blob: ps.Blob, Recipient: ps.Recipient})
	}
	for _, k := range slices.Sorted(maps.Keys(current)) {
		cur := current[k]
		if cur.Owner.Kind != api.OwnerGit || cur.Owner.Source != in.Source || claimed[k] != "" {
			continue
		}
		_, listed := in.Listing.Secrets[cur.Owner.Path]
		ps, parsed := in.Secrets[cur.Owner.Path]
		renamed := parsed && ps.Err == nil
		if !listed || renamed {
			p.DeleteSecrets = append(p.DeleteSecrets, WorkloadRef{Namespace: cur.Namespace, Name: cur.Name, Path: cur.Owner.Path})
		}
	}
}

// secretStillDefined reports whether path, the file of a secret at the last
// applied commit, is listed and unchanged in this commit.
func secretStillDefined(in DecideInput, path string) bool {
	_, listed := in.Listing.Secrets[path]
	_, parsed := in.Secrets[path]
	return listed && !parsed
}

// describeSecret formats a secret file's error: the file's field errors, or
// the error after the file's path.
func describeSecret(path string, err error) string {
	var list quadlet.ErrorList
	if errors.As(err, &list) {
		return describe(pathpkg.Dir(path), err)
	}
	return path + ": " + err.Error()
}

// describe formats a directory's error with the directory in front of each
// file name, one problem per "; ".
func describe(path string, err error) string {
	var list quadlet.ErrorList
	if errors.As(err, &list) {
		parts := make([]string, 0, len(list))
		for _, fe := range list {
			s := fe.Error()
			if fe.File != "" {
				s = path + "/" + s
			}
			parts = append(parts, s)
		}
		sort.Strings(parts)
		return strings.Join(parts, "; ")
	}
	return path + ": " + err.Error()
}

// stillDefines reports whether path, a directory of the last applied commit,
// still defines its workload: it is listed and unchanged in this commit.
func stillDefines(in DecideInput, path string) bool {
	_, listed := in.Listing.Dirs[path]
	_, parsed := in.Parsed[path]
	return listed && !parsed
}

// WithRetries adds to c the listed directories and secret files that had
// errors at the last applied commit, so that they are parsed again: what
// they depend on (a namespace, another directory) may have changed.
func WithRetries(c Changes, next Listing, prevErrors []api.PathError) Changes {
	for _, e := range prevErrors {
		if _, ok := next.Dirs[e.Path]; ok && !slices.Contains(c.Dirs, e.Path) {
			c.Dirs = append(c.Dirs, e.Path)
		}
		if _, ok := next.Secrets[e.Path]; ok && !slices.Contains(c.Secrets, e.Path) {
			c.Secrets = append(c.Secrets, e.Path)
		}
	}
	slices.Sort(c.Dirs)
	slices.Sort(c.Secrets)
	return c
}
