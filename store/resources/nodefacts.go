package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"kat.dws.rip/kat/api"
)

// NodeFacts records the facts a node reports about itself: its status (the
// heartbeat), its build records and its events. It is the one
// implementation of recording each: the API server records with one what
// workers send it (a worker's etcd user may not write), and a member, whose
// may, records its own facts with another, so a fact is recorded the same
// way whichever road it took. It is safe for concurrent use.
//
// A NodeFacts remembers, per node, the version of its registration and the
// status it last wrote, so an unchanged heartbeat writes only its time and
// reads nothing; it starts empty (the API server makes one per term).
type NodeFacts struct {
	repo *Repo
	// overlay records a node's overlay identity; nil: not recorded.
	overlay func(ctx context.Context, node string, o api.NodeOverlay) error

	mu sync.Mutex
	// nodes is what was last recorded of each node's heartbeat.
	nodes map[string]reportedNode
	// overlays are the overlay identities recorded per node.
	overlays map[string]api.NodeOverlay
}

// reportedNode is what NodeFacts remembers of a node between heartbeats.
type reportedNode struct {
	// regVersion is the version of its registration last read.
	regVersion int64
	// status is the status last written, when has.
	status api.NodeStatus
	has    bool
}

// NewNodeFacts returns a recorder of the facts nodes report, in repo.
// overlay records a node's overlay identity (its WireGuard public key and
// port, from its status reports) in the cluster's overlay records: it is
// called the first time this recorder sees a node's identity and whenever
// it changes, and again after it failed. nil: reports' overlays are not
// recorded.
func NewNodeFacts(repo *Repo, overlay func(ctx context.Context, node string, o api.NodeOverlay) error) *NodeFacts {
	return &NodeFacts{repo: repo, overlay: overlay, nodes: map[string]reportedNode{}, overlays: map[string]api.NodeOverlay{}}
}

// RecordStatus records a node's status report: its heartbeat and usage,
// its status when that changed (the timestamp and usage aside), and its
// overlay identity when that is new. The node must be registered: an error wrapping ErrNotFound
// says it is not (any more). The recorder keeps st to compare the next
// report with: the caller must not change it (nor its slices) afterwards.
func (f *NodeFacts) RecordStatus(ctx context.Context, st api.NodeStatus) error {
	if err := f.recordHeartbeat(ctx, st); err != nil {
		return err
	}
	return f.recordOverlay(ctx, st)
}

// recordHeartbeat writes a registered node's heartbeat, and its status when
// that changed (the timestamp aside). The registration is read only when it
// is not known yet or changed since: the write is fenced by its version.
func (f *NodeFacts) recordHeartbeat(ctx context.Context, st api.NodeStatus) error {
	node := st.NodeName
	f.mu.Lock()
	last, known := f.nodes[node]
	f.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if !known || attempt > 0 {
			ver, err := f.repo.NodeRegistrationVersion(ctx, node)
			if err != nil {
				f.forget(node)
				return err
			}
			last = reportedNode{regVersion: ver}
		}
		changed := !last.has || !sameStatus(last.status, st)
		ok, err := f.repo.RecordHeartbeat(ctx, st, changed, last.regVersion)
		if err != nil {
			f.forget(node)
			return err
		}
		if ok {
			f.mu.Lock()
			f.nodes[node] = reportedNode{regVersion: last.regVersion, status: st, has: true}
			f.mu.Unlock()
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("record the heartbeat of node %s: its registration keeps changing: %w", node, ErrConflict)
		}
		// The registration changed (or went): read it again.
	}
}

func (f *NodeFacts) forget(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.nodes, node)
}

// sameStatus reports whether two reports of a node are equal but for their
// timestamps and usage, which change with every report.
func sameStatus(a, b api.NodeStatus) bool {
	a.Timestamp, b.Timestamp = 0, 0
	a.Usage, b.Usage = nil, nil
	return reflect.DeepEqual(a, b)
}

// recordOverlay hands a node's reported overlay identity to the overlay
// function the first time it is seen and whenever it changes; a failed
// call is retried with the next report.
func (f *NodeFacts) recordOverlay(ctx context.Context, st api.NodeStatus) error {
	if st.Overlay == nil || f.overlay == nil {
		return nil
	}
	f.mu.Lock()
	last, seen := f.overlays[st.NodeName]
	f.mu.Unlock()
	if seen && last == *st.Overlay {
		return nil
	}
	if err := f.overlay(ctx, st.NodeName, *st.Overlay); err != nil {
		return fmt.Errorf("record the overlay of node %s: %w", st.NodeName, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.overlays[st.NodeName] = *st.Overlay
	return nil
}

// PutBuildRecord stores a node's record of a build under
// /kat/builds/{ns}/{name}/{commit12}/{node} (build.RecordStore).
func (f *NodeFacts) PutBuildRecord(ctx context.Context, r api.Build) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode build record: %w", err)
	}
	return f.PutBuildRecordJSON(ctx, r, b)
}

// PutBuildRecordJSON stores a node's record of a build as the node encoded
// it (raw); r is raw decoded, whose names say where it goes.
func (f *NodeFacts) PutBuildRecordJSON(ctx context.Context, r api.Build, raw []byte) error {
	return f.repo.PutBuildRecordJSON(ctx, r.Namespace, r.Workload, r.Commit, r.Node, raw)
}

// RecordDeparture records that node's agent leaves for good
// (MarkNodeDeparted, at the recorder's clock), with a NodeDeparted event.
func (f *NodeFacts) RecordDeparture(ctx context.Context, node string, d api.NodeDeparture) error {
	now := f.repo.now().UTC()
	if err := f.repo.MarkNodeDeparted(ctx, node, d.AgentStartedAt, now); err != nil {
		return err
	}
	f.forget(node) // its registration changed
	return f.repo.AppendEvent(ctx, api.Event{Time: now, Type: api.EventNormal, Object: "node/" + node, Reason: EventNodeDeparted,
		Message: fmt.Sprintf("node %s departed: its Service instances move to other nodes, its DaemonService instances are removed", node)})
}

// Reasons of the events about nodes.
const (
	EventNodeDeparted = "NodeDeparted"
)

// AppendEvent records an event a node reports, at the time it is recorded
// (the recorder's clock, not the node's).
func (f *NodeFacts) AppendEvent(ctx context.Context, ev api.Event) error {
	ev.Time = f.repo.now().UTC()
	return f.repo.AppendEvent(ctx, ev)
}
