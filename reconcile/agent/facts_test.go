package agent

import (
	"context"
	"sync"

	"kat.dws.rip/kat/api"
)

// memoryFacts is a node's Facts in memory: it keeps what it records, in
// order, and fails status reports with statusErrs first, one each.
type memoryFacts struct {
	mu         sync.Mutex
	statusErrs []error
	status     []api.NodeStatus
	builds     []api.Build
	events     []api.Event
}

var _ Facts = (*memoryFacts)(nil)

func (f *memoryFacts) RecordStatus(_ context.Context, st api.NodeStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.statusErrs) > 0 {
		err := f.statusErrs[0]
		f.statusErrs = f.statusErrs[1:]
		return err
	}
	f.status = append(f.status, st)
	return nil
}

func (f *memoryFacts) PutBuildRecord(_ context.Context, r api.Build) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.builds = append(f.builds, r)
	return nil
}

func (f *memoryFacts) AppendEvent(_ context.Context, ev api.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, ev)
	return nil
}

func (f *memoryFacts) RecordDeparture(_ context.Context, node string, _ api.NodeDeparture) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, api.Event{Object: "node/" + node, Reason: "NodeDeparted"})
	return nil
}

// statuses returns the status reports recorded so far.
func (f *memoryFacts) statuses() []api.NodeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.NodeStatus(nil), f.status...)
}
