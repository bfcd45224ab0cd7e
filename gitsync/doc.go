// Package gitsync follows config-repo sources: it keeps a bare clone of each
// source's branch in the data directory (a file:// repository on this machine
// is read in place instead, as git clone --local shares its objects), polls
// the remote head cheaply (or is woken by a webhook or "katcall sync"),
// fetches only when the head moved, diffs the last applied commit's tree
// against the new one, and writes the changed Quadlet directories into etcd
// as desired state owned by the source. Directories that disappeared are
// pruned.
//
// A minimal use, on the leader:
//
//	m := gitsync.NewManager(gitsync.Config{Repo: repo, DataDir: dir, Logger: log})
//	err := m.Run(leaderCtx) // until leadership ends
//
// # Sources
//
// A source (api.SourceSpec) names a URL (https://, http://, ssh:// or
// file://), a branch, a path inside the repository and a poll interval, and
// optionally credential files, an armored PGP keyring and AllowPruneAll. Its
// spec and status live under /kat/sources/{name}/. The Manager watches the
// specs and runs one loop per source.
//
// # Deciding what to write
//
// A workload directory is any directory under the source's path holding
// workload.kat; namespace.kat files define namespaces. Each commit is listed
// as directory → tree hash, so a directory changed between two commits
// exactly when its tree hash differs: only those are read and parsed, and
// only the trees on the way to them are read. When the last applied commit
// is unknown (first sync, force-push, an interrupted apply) every directory
// is parsed and compared with etcd by spec hash. The current desired state
// comes from a watch-fed index (resources.DesiredIndex, shared with the
// leader's loops), so a commit of one directory costs work on that
// directory, not on every workload; the workloads are written in batches
// (resources.ApplyWorkloads). The decision (ChangedPaths, Decide) is pure;
// the loop does the I/O.
//
// # Isolation and pruning
//
// An invalid directory keeps its last good desired state; the source's
// status lists the error with file and line until a commit fixes it (the
// leader's status loop shows it on the workload as a Stalled condition). A Git-owned workload whose directory
// disappeared is deleted, unless the commit would delete every workload of
// the source and the source does not allow that. Workloads whose Git
// management is suspended ("katcall apply --force", "katcall suspend") are
// neither written nor pruned.
//
// # Security
//
// Credentials are read from files on the leader and never stored in etcd;
// gitx reads them, checks SSH host keys against the source's known_hosts and
// strips credentials from URLs before they reach an error or a log. With
// a keyring, a head commit not signed by one of its keys is not applied.
package gitsync
