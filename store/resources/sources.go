package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"kat.dws.rip/kat/store"
)

// SourceSpec is a config-repo source the leader follows (DESIGN.md,
// /kat/sources/{source}/spec). gitsync validates it.
type SourceSpec struct {
	// Name is the source's name, a DNS label.
	Name string `json:"name"`
	// URL is an https://, http://, ssh:// or file:// URL, without a password.
	URL string `json:"url"`
	// Branch is the branch followed. Default "main".
	Branch string `json:"branch"`
	// Path is the directory of the repository holding the workload
	// directories. Default ".".
	Path string `json:"path"`
	// IntervalSeconds is the time between polls. Default 30.
	IntervalSeconds int `json:"intervalSeconds"`
	// Auth names files on the leader holding credentials; empty: none.
	Auth SourceAuth `json:"auth,omitzero"`
	// KeyringFile is an armored PGP public keyring on the leader; when set,
	// only commits signed by one of its keys are applied. Default none.
	KeyringFile string `json:"keyringFile,omitempty"`
	// AllowPruneAll lets a commit delete every workload of the source.
	// Default false: such a commit is refused.
	AllowPruneAll bool `json:"allowPruneAll,omitempty"`
	// UpdatedAt is when the spec was last written.
	UpdatedAt time.Time `json:"updatedAt"`
}

// SourceAuth names credential files; the credentials themselves never enter
// etcd.
type SourceAuth struct {
	// TokenFile holds a token sent as the HTTP basic password, with Username
	// (default "x-access-token") as the user.
	TokenFile string `json:"tokenFile,omitempty"`
	// Username is the HTTP user sent with TokenFile, or the SSH user (default
	// "git").
	Username string `json:"username,omitempty"`
	// BasicAuthFile holds "user:password" on its first line.
	BasicAuthFile string `json:"basicAuthFile,omitempty"`
	// SSHKeyFile is a PEM private key for ssh:// URLs.
	SSHKeyFile string `json:"sshKeyFile,omitempty"`
	// KnownHostsFile is the known_hosts file SSH host keys are checked
	// against; required with SSHKeyFile.
	KnownHostsFile string `json:"knownHostsFile,omitempty"`
}

// PathError is a problem with one path of a source at a commit.
type PathError struct {
	// Path is the directory or file inside the repository.
	Path string `json:"path"`
	// Error says what is wrong, with file and line where known.
	Error string `json:"error"`
	// Commit is the commit the error was found at.
	Commit string `json:"commit,omitempty"`
}

// SourceStatus is how far the leader has got with a source.
type SourceStatus struct {
	// FetchedCommit is the branch head last fetched.
	FetchedCommit string `json:"fetchedCommit,omitempty"`
	// AppliedCommit is the last commit whose changes were all written.
	AppliedCommit string `json:"appliedCommit,omitempty"`
	// LastAttemptedCommit is the last commit an apply was started for.
	LastAttemptedCommit string `json:"lastAttemptedCommit,omitempty"`
	// LastFetchTime is when the remote was last reached.
	LastFetchTime time.Time `json:"lastFetchTime,omitzero"`
	// LastAppliedTime is when AppliedCommit was written.
	LastAppliedTime time.Time `json:"lastAppliedTime,omitzero"`
	// LastError is the last error of the source as a whole; empty when the
	// last attempt succeeded.
	LastError string `json:"lastError,omitempty"`
	// PathErrors are the directories of AppliedCommit that could not be
	// applied; they keep their last good desired state.
	PathErrors []PathError `json:"pathErrors,omitempty"`
	// Workloads is how many workloads the source manages.
	Workloads int `json:"workloads"`
	// Conditions are Ready, and Stalled or Reconciling when true.
	Conditions []Condition `json:"conditions,omitempty"`
	// UpdatedAt is when the status was last written.
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// Source is a source's spec and status together.
type Source struct {
	Spec   SourceSpec   `json:"spec"`
	Status SourceStatus `json:"status"`
}

// PutSourceSpec creates or replaces a source's spec and reports whether it
// was created.
func (r *Repo) PutSourceSpec(ctx context.Context, spec SourceSpec) (bool, error) {
	spec.UpdatedAt = r.now().UTC()
	op, err := putJSON(SourceSpecKey(spec.Name), spec)
	if err != nil {
		return false, err
	}
	ver, err := r.getJSON(ctx, SourceSpecKey(spec.Name), &SourceSpec{})
	if err != nil {
		return false, fmt.Errorf("put source %q: %w", spec.Name, err)
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return false, fmt.Errorf("put source %q: %w", spec.Name, err)
	}
	return ver == 0, nil
}

// CreateSourceSpec writes spec only when no source of that name exists, and
// reports whether it did.
func (r *Repo) CreateSourceSpec(ctx context.Context, spec SourceSpec) (bool, error) {
	spec.UpdatedAt = r.now().UTC()
	op, err := putJSON(SourceSpecKey(spec.Name), spec)
	if err != nil {
		return false, err
	}
	ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: op.Key, ExpectedVersion: 0}}, []store.Op{op}, nil)
	if err != nil {
		return false, fmt.Errorf("create source %q: %w", spec.Name, err)
	}
	return ok, nil
}

// GetSource returns a source's spec and status.
func (r *Repo) GetSource(ctx context.Context, name string) (*Source, error) {
	var s Source
	ver, err := r.getJSON(ctx, SourceSpecKey(name), &s.Spec)
	if err != nil {
		return nil, fmt.Errorf("get source %q: %w", name, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("source %q: %w", name, ErrNotFound)
	}
	if _, err := r.getJSON(ctx, SourceStatusKey(name), &s.Status); err != nil {
		return nil, fmt.Errorf("get source status %q: %w", name, err)
	}
	return &s, nil
}

// ListSources returns every source sorted by name.
func (r *Repo) ListSources(ctx context.Context) ([]Source, error) {
	kvs, err := r.st.List(ctx, prefixSources)
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	byName := map[string]*Source{}
	var out []*Source
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, prefixSources)
		name, kind, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		s := byName[name]
		if s == nil {
			s = &Source{}
			byName[name] = s
			out = append(out, s)
		}
		var err error
		switch kind {
		case "spec":
			err = json.Unmarshal(kv.Value, &s.Spec)
		case "status":
			err = json.Unmarshal(kv.Value, &s.Status)
		}
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
	}
	res := make([]Source, 0, len(out))
	for _, s := range out {
		if s.Spec.Name != "" { // a status without a spec is a leftover
			res = append(res, *s)
		}
	}
	return res, nil
}

// PutSourceStatus replaces a source's status.
func (r *Repo) PutSourceStatus(ctx context.Context, name string, st SourceStatus) error {
	st.UpdatedAt = r.now().UTC()
	op, err := putJSON(SourceStatusKey(name), st)
	if err != nil {
		return err
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return fmt.Errorf("put source status %q: %w", name, err)
	}
	return nil
}

// DeleteSource removes a source's spec and status. The workloads it manages
// stay, still owned by it, until another source or the API takes them over.
func (r *Repo) DeleteSource(ctx context.Context, name string) error {
	if _, err := r.st.Get(ctx, SourceSpecKey(name)); err != nil {
		return fmt.Errorf("source %q: %w", name, notFoundAs(err))
	}
	if err := r.st.Delete(ctx, SourceSpecKey(name)); err != nil {
		return fmt.Errorf("delete source %q: %w", name, err)
	}
	if err := r.st.Delete(ctx, SourceStatusKey(name)); err != nil {
		return fmt.Errorf("delete source status %q: %w", name, err)
	}
	return nil
}
