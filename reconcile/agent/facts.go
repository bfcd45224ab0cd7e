package agent

import (
	"context"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/store/resources"
)

// Facts is where a node's facts go: its status (the heartbeat), its build
// records (the Builder's build.RecordStore) and its events. A node picks one
// road for all of them where it is wired: a member, whose etcd user may
// write, records them itself with a resources.NodeFacts, the very code the
// leader's API records a worker's with; a worker, whose etcd user may only
// read, sends them to the leader's API through a LeaderLink.
type Facts interface {
	// RecordStatus records the node's status report (RunHeartbeat).
	RecordStatus(ctx context.Context, st api.NodeStatus) error
	// PutBuildRecord stores a build record of this node.
	build.RecordStore
	// AppendEvent records an event (a failed build).
	AppendEvent(ctx context.Context, ev api.Event) error
	// RecordDeparture records that the node's agent leaves for good.
	RecordDeparture(ctx context.Context, node string, d api.NodeDeparture) error
}

var (
	_ Facts = (*resources.NodeFacts)(nil)
	_ Facts = (*LeaderLink)(nil)
)
