package api

import (
	"time"
)

// Backup is one etcd snapshot the leader wrote and checked.
type Backup struct {
	// Path is the snapshot file on the leader node.
	Path string `json:"path"`
	// Node is the leader node that wrote it.
	Node string `json:"node"`
	// Time is when it was taken.
	Time time.Time `json:"time"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// Revision is the etcd revision the snapshot holds the state of.
	Revision int64 `json:"revision"`
	// Keys is the number of etcd keys in it.
	Keys int `json:"keys"`
}

// BackupStatus is the leader's record of its backups (katcall status).
type BackupStatus struct {
	// Last is the newest snapshot written; nil before the first.
	Last *Backup `json:"last,omitempty"`
	// LastAttempt is when the leader last tried to write one.
	LastAttempt time.Time `json:"lastAttempt"`
	// Error is why the last attempt failed; empty when it succeeded.
	Error string `json:"error,omitempty"`
}
