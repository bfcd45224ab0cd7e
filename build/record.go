package build

import (
	"context"
	"slices"
	"sync"
	"time"
)

// State is the state of a build.
type State string

// Build states.
const (
	// StateBuilding means the build (or the cache pull) is under way.
	StateBuilding State = "Building"
	// StateSucceeded means the image exists on the node.
	StateSucceeded State = "Succeeded"
	// StateFailed means the build failed; Record.Error says why.
	StateFailed State = "Failed"
)

// Record is what one node knows about the build of one commit of a
// workload. The agent stores it under /kat/builds/{ns}/{name}/{commit12}.
type Record struct {
	// Namespace and Workload name the workload built.
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	// Commit is the full commit hash built.
	Commit string `json:"commit"`
	// Node is the node that built it (Config.Node).
	Node string `json:"node"`
	// Image is the local image name, kat-local/{ns}_{workload}:{commit12}.
	Image string `json:"image"`
	// ImageID is the image's ID once it exists.
	ImageID string `json:"imageID,omitempty"`
	// State is Building, Succeeded or Failed.
	State State `json:"state"`
	// CacheHit is true when the image came from the cache registry and
	// nothing was built.
	CacheHit bool `json:"cacheHit"`
	// Existing is true when the image was already on the node and nothing
	// was done. Such records are returned by Build but not stored.
	Existing bool `json:"existing,omitempty"`
	// Shallow is true when the commit was fetched alone (depth 1), false
	// when the server did not allow it and the whole repository was
	// fetched.
	Shallow bool `json:"shallow,omitempty"`
	// StartedAt and FinishedAt bound the build; FinishedAt is zero while
	// it runs.
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Error says why the build failed.
	Error string `json:"error,omitempty"`
	// Warnings are problems that did not fail the build, such as a failed
	// push to the cache registry.
	Warnings []string `json:"warnings,omitempty"`
	// LogTail is the end of the build log (at most about 4 KiB).
	LogTail string `json:"logTail,omitempty"`
	// LogPath is the build log's file on the node; Builder.Log reads it.
	LogPath string `json:"logPath,omitempty"`
}

// Commit12 returns the first 12 characters of Commit, the image tag.
func (r Record) Commit12() string { return short(r.Commit) }

// RecordStore is where a Builder puts its records: the agent implements it
// with an etcd write to /kat/builds/{ns}/{name}/{commit12}.
type RecordStore interface {
	// PutBuildRecord stores r, replacing the record of the same namespace,
	// workload, commit and node.
	PutBuildRecord(ctx context.Context, r Record) error
}

// MemoryRecords is a RecordStore in memory, for tests. The zero value is
// ready to use and safe for concurrent use.
type MemoryRecords struct {
	mu      sync.Mutex
	history []Record
}

var _ RecordStore = (*MemoryRecords)(nil)

// PutBuildRecord implements RecordStore.
func (m *MemoryRecords) PutBuildRecord(_ context.Context, r Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Warnings = slices.Clone(r.Warnings)
	m.history = append(m.history, r)
	return nil
}

// Get returns the latest record of a namespace, workload and commit (full
// or 12 characters).
func (m *MemoryRecords) Get(namespace, workload, commit string) (Record, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range slices.Backward(m.history) {
		if r.Namespace == namespace && r.Workload == workload && short(r.Commit) == short(commit) {
			return r, true
		}
	}
	return Record{}, false
}

// History returns every record put, oldest first.
func (m *MemoryRecords) History() []Record {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.history)
}
