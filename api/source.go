package api

import "time"

// SourceSpec is a config-repo source the leader follows
// (/kat/sources/{source}/spec), the body of PUT /v1alpha1/sources/{name}.
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
	Auth GitAuth `json:"auth,omitzero"`
	// KeyringFile is an armored PGP public keyring on the leader; when set,
	// only commits signed by one of its keys are applied. Default none.
	KeyringFile string `json:"keyringFile,omitempty"`
	// AllowPruneAll lets a commit delete every workload of the source.
	// Default false: such a commit is refused.
	AllowPruneAll bool `json:"allowPruneAll,omitempty"`
	// UpdatedAt is when the spec was last written.
	UpdatedAt time.Time `json:"updatedAt"`
}

// GitAuth names the files holding the credentials of a Git repository: a
// config-repo source's, or the app repositories' (kat-agent
// --app-repo-* flags). At most one of TokenFile, BasicAuthFile and
// SSHKeyFile is set. The credentials themselves never enter etcd or the
// API; the files are read on the node that uses them, at every use, so a
// rotated secret is picked up.
type GitAuth struct {
	// TokenFile holds a token (first line) sent as the HTTP basic password,
	// with Username (default "x-access-token") as the user.
	TokenFile string `json:"tokenFile,omitempty"`
	// Username is the HTTP user sent with TokenFile, or the SSH user
	// (default: the URL's user, else "git").
	Username string `json:"username,omitempty"`
	// BasicAuthFile holds "user:password" on its first line.
	BasicAuthFile string `json:"basicAuthFile,omitempty"`
	// SSHKeyFile is an unencrypted PEM private key for ssh:// and scp-like
	// URLs.
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

// Source is a Git source's spec and status together.
type Source struct {
	Spec   SourceSpec   `json:"spec"`
	Status SourceStatus `json:"status"`
}

// SyncResult is the response to a sync request.
type SyncResult struct {
	// Triggered is how many sources were asked to poll now.
	Triggered int `json:"triggered"`
}
