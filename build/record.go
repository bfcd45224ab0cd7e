package build

import (
	"context"
	"slices"
	"sync"

	"kat.dws.rip/kat/api"
)

// RecordStore is where a Builder puts its records: the agent implements it
// with an etcd write to /kat/builds/{ns}/{name}/{commit12}.
type RecordStore interface {
	// PutBuildRecord stores r, replacing the record of the same namespace,
	// workload, commit and node.
	PutBuildRecord(ctx context.Context, r api.Build) error
}

// MemoryRecords is a RecordStore in memory, for tests. The zero value is
// ready to use and safe for concurrent use.
type MemoryRecords struct {
	mu      sync.Mutex
	history []api.Build
}

var _ RecordStore = (*MemoryRecords)(nil)

// PutBuildRecord implements RecordStore.
func (m *MemoryRecords) PutBuildRecord(_ context.Context, r api.Build) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r.Warnings = slices.Clone(r.Warnings)
	m.history = append(m.history, r)
	return nil
}

// Get returns the latest record of a namespace, workload and commit (full
// or 12 characters).
func (m *MemoryRecords) Get(namespace, workload, commit string) (api.Build, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range slices.Backward(m.history) {
		if r.Namespace == namespace && r.Workload == workload && api.ShortCommit(r.Commit) == api.ShortCommit(commit) {
			return r, true
		}
	}
	return api.Build{}, false
}

// History returns every record put, oldest first.
func (m *MemoryRecords) History() []api.Build {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.history)
}
