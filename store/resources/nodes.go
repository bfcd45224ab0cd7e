package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// NodeNameLabel is the label every node carries with its own name, for
// nodeSelectors; KAT sets it and operators cannot change it.
const NodeNameLabel = "kat.dws.rip/nodeName"

// NodeTypeLabel is the label of a node's type (kat-agent join --node-type,
// such as stable or laptop), for nodeSelectors.
const NodeTypeLabel = "kat.dws.rip/nodeType"

// KeepOperatorFields returns reg, as a node registers itself again (a
// restart, a rejoin), with what the operator set on its old registration
// kept: the first JoinedAt, taints, cordon and drain, and labels, of which
// reg's own (its --node-label flags) win.
func KeepOperatorFields(old, reg api.NodeRegistration) api.NodeRegistration {
	reg.JoinedAt = old.JoinedAt
	reg.Taints, reg.Unschedulable, reg.Draining = old.Taints, old.Unschedulable, old.Draining
	if len(old.Labels) > 0 {
		labels := make(map[string]string, len(old.Labels)+len(reg.Labels))
		for k, v := range old.Labels {
			labels[k] = v
		}
		for k, v := range reg.Labels {
			labels[k] = v
		}
		reg.Labels = labels
	}
	return reg
}

// Node is a node's registration with its last status.
type Node struct {
	Registration api.NodeRegistration
	Status       *api.NodeStatus
	// Heartbeat is the node's last heartbeat; zero when it never beat.
	Heartbeat time.Time
}

// Ready reports whether the node is Ready at now: it has heartbeat, its
// last heartbeat is no older than lossTimeout (cluster.kat's
// nodeLossTimeoutSeconds) and it has not departed
// (api.NodeRegistration.Departed); otherwise it is NotReady.
func (n Node) Ready(now time.Time, lossTimeout time.Duration) bool {
	return HeartbeatFresh(n.Heartbeat, now, lossTimeout) && !n.Departed()
}

// Departed reports whether the node's agent departed and no agent started
// since has reported.
func (n Node) Departed() bool {
	var started time.Time
	if n.Status != nil {
		started = n.Status.AgentStartedAt
	}
	return n.Registration.Departed(started)
}

// MarkNodeDeparted records that node's agent, started at agentStartedAt,
// departed at now. An unknown node is an error wrapping ErrNotFound.
func (r *Repo) MarkNodeDeparted(ctx context.Context, node string, agentStartedAt, now time.Time) error {
	_, err := r.UpdateNodeRegistration(ctx, node, func(reg *api.NodeRegistration) error {
		reg.DepartedAt, reg.DepartedAgentStart = &now, agentStartedAt
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the departure of node %q: %w", node, err)
	}
	return nil
}

// HeartbeatFresh reports whether a node whose last heartbeat was at
// heartbeat (zero: never) is Ready at now: the one rule of readiness, which
// the API's node views and the leader's scheduler share.
func HeartbeatFresh(heartbeat, now time.Time, lossTimeout time.Duration) bool {
	return !heartbeat.IsZero() && now.Sub(heartbeat) <= lossTimeout
}

// HeartbeatInTerm returns the heartbeat by which the leader of a term that
// began at termStart judges a node: a node that beat before the term counts
// as having beat at its start, since heartbeats reach etcd through the
// leader and none could arrive while there was none; so a new leader gives
// every node a whole lossTimeout before it counts it lost. A zero heartbeat
// (never beat) stays zero; a zero termStart changes nothing.
func HeartbeatInTerm(heartbeat, termStart time.Time) time.Time {
	if !heartbeat.IsZero() && heartbeat.Before(termStart) {
		return termStart
	}
	return heartbeat
}

// LastHeartbeat returns a node's last heartbeat from its heartbeat record's
// timestamp (0: none) and its status (nil: none): the later of the two, or
// zero when it never beat.
func LastHeartbeat(beat int64, st *api.NodeStatus) time.Time {
	if st != nil {
		beat = max(beat, st.Timestamp)
	}
	if beat == 0 {
		return time.Time{}
	}
	return time.Unix(beat, 0).UTC()
}

// PutNodeRegistration records a node's registration.
func (r *Repo) PutNodeRegistration(ctx context.Context, reg api.NodeRegistration) error {
	op, err := putJSON(NodeRegistrationKey(reg.Name), reg)
	if err != nil {
		return err
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return fmt.Errorf("register node %q: %w", reg.Name, err)
	}
	return nil
}

// RegisterSelf records the registration of a node that registers itself
// as it starts to lead: a new one as it is, or, over an old one,
// KeepOperatorFields of both. The write happens only while the
// registration is as read, so a cordon, drain, taint or label the
// operator sets meanwhile is kept, not overwritten.
func (r *Repo) RegisterSelf(ctx context.Context, reg api.NodeRegistration) error {
	_, err := updateJSON(ctx, r, NodeRegistrationKey(reg.Name), func(cur *api.NodeRegistration, ver int64) error {
		if ver == 0 {
			*cur = reg
			return nil
		}
		*cur = KeepOperatorFields(*cur, reg)
		return nil
	})
	if err != nil {
		return fmt.Errorf("register node %q: %w", reg.Name, err)
	}
	return nil
}

// ErrNodeNameTaken means a node name is registered to a node of another
// UID.
var ErrNodeNameTaken = errors.New("node name taken")

// RegisterJoiningNode records the registration of a node that joins: a new
// name, or the name of the same node (same UID) joining again, which keeps
// its first JoinedAt. A name registered to another UID is refused with an
// error wrapping ErrNodeNameTaken, and nothing is written. Two joins of one
// name race safely: the write happens only while the registration is as
// read.
func (r *Repo) RegisterJoiningNode(ctx context.Context, reg api.NodeRegistration) error {
	_, err := updateJSON(ctx, r, NodeRegistrationKey(reg.Name), func(cur *api.NodeRegistration, ver int64) error {
		if ver == 0 {
			*cur = reg
			return nil
		}
		if cur.UID != reg.UID {
			return fmt.Errorf("%w: node %q is registered to another node (uid %s, joined %s); choose another --node-name, or remove that node first", ErrNodeNameTaken, reg.Name, cur.UID, cur.JoinedAt.Format(time.RFC3339))
		}
		*cur = KeepOperatorFields(*cur, reg)
		return nil
	})
	return err
}

// GetNodeRegistration returns a node's registration.
func (r *Repo) GetNodeRegistration(ctx context.Context, name string) (*api.NodeRegistration, error) {
	var reg api.NodeRegistration
	ver, err := r.getJSON(ctx, NodeRegistrationKey(name), &reg)
	if err != nil {
		return nil, fmt.Errorf("read node %q: %w", name, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	return &reg, nil
}

// PutNodeStatus records a node's status and heartbeat.
func (r *Repo) PutNodeStatus(ctx context.Context, st api.NodeStatus) error {
	if _, err := r.RecordHeartbeat(ctx, st, true, 0); err != nil {
		return err
	}
	return nil
}

// RecordHeartbeat records a node's heartbeat (its time) and usage and,
// with withStatus, its status (without the usage) in the same transaction. A heartbeat that changes
// nothing but the time is written without the status, so the leader's loops,
// which follow statuses, are not woken by it. With regVersion, the write
// happens only while the node's registration is at that version (it reports
// false otherwise): the caller needs to read the registration only when it
// changed, not on every beat.
func (r *Repo) RecordHeartbeat(ctx context.Context, st api.NodeStatus, withStatus bool, regVersion int64) (bool, error) {
	hb, err := putJSON(NodeHeartbeatKey(st.NodeName), api.NodeHeartbeat{Timestamp: st.Timestamp})
	if err != nil {
		return false, err
	}
	ops := []store.Op{hb}
	// Usage changes with every beat: it lives beside the heartbeat
	// (NodeUsageKey), never in the status, which then changes only when
	// something else does.
	if st.Usage != nil {
		op, err := putJSON(NodeUsageKey(st.NodeName), st.Usage)
		if err != nil {
			return false, err
		}
		ops = append(ops, op)
		st.Usage = nil
	}
	if withStatus {
		op, err := putJSON(NodeStatusKey(st.NodeName), st)
		if err != nil {
			return false, err
		}
		ops = append(ops, op)
	}
	var checks []store.Compare
	if regVersion != 0 {
		checks = []store.Compare{{Key: NodeRegistrationKey(st.NodeName), ExpectedVersion: regVersion}}
	}
	ok, err := r.st.DoTransaction(ctx, checks, ops, nil)
	if err != nil {
		return false, fmt.Errorf("record status of node %q: %w", st.NodeName, err)
	}
	return ok, nil
}

// NodeRegistrationVersion returns the version of a node's registration, or
// an error wrapping ErrNotFound when the node is not registered.
func (r *Repo) NodeRegistrationVersion(ctx context.Context, name string) (int64, error) {
	kv, err := r.st.Get(ctx, NodeRegistrationKey(name))
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read node %q: %w", name, err)
	}
	return kv.Version, nil
}

// ListNodes returns every registered node with its last status, by name.
func (r *Repo) ListNodes(ctx context.Context) ([]Node, error) {
	regs, err := r.st.List(ctx, prefixRegistration)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	sts, err := r.st.List(ctx, prefixNodeStatus)
	if err != nil {
		return nil, fmt.Errorf("list node status: %w", err)
	}
	status := map[string]*api.NodeStatus{}
	for _, kv := range sts {
		var s api.NodeStatus
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		status[strings.TrimPrefix(kv.Key, prefixNodeStatus)] = &s
	}
	hbs, err := r.st.List(ctx, prefixHeartbeat)
	if err != nil {
		return nil, fmt.Errorf("list node heartbeats: %w", err)
	}
	beats := map[string]int64{}
	for _, kv := range hbs {
		var hb api.NodeHeartbeat
		if err := json.Unmarshal(kv.Value, &hb); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		beats[strings.TrimPrefix(kv.Key, prefixHeartbeat)] = hb.Timestamp
	}
	usages, err := r.st.List(ctx, prefixNodeUsage)
	if err != nil {
		return nil, fmt.Errorf("list node usage: %w", err)
	}
	for _, kv := range usages {
		if s := status[strings.TrimPrefix(kv.Key, prefixNodeUsage)]; s != nil {
			s.Usage = new(api.NodeUsage)
			if err := json.Unmarshal(kv.Value, s.Usage); err != nil {
				return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
			}
		}
	}
	out := make([]Node, 0, len(regs))
	for _, kv := range regs {
		var n Node
		if err := json.Unmarshal(kv.Value, &n.Registration); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		n.Status = status[n.Registration.Name]
		n.Heartbeat = LastHeartbeat(beats[n.Registration.Name], n.Status)
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Registration.Name < out[j].Registration.Name })
	return out, nil
}

// UpdateNodeRegistration applies change to a node's registration and writes
// it while the registration is as read, retrying when another writer got
// there first; change sees a fresh copy each time. It returns the written
// registration, or an error wrapping ErrNotFound for an unknown node, or
// change's error, with nothing written.
func (r *Repo) UpdateNodeRegistration(ctx context.Context, name string, change func(*api.NodeRegistration) error) (*api.NodeRegistration, error) {
	return updateJSON(ctx, r, NodeRegistrationKey(name), func(reg *api.NodeRegistration, ver int64) error {
		if ver == 0 {
			return fmt.Errorf("node %q: %w", name, ErrNotFound)
		}
		return change(reg)
	})
}

// DeleteNode removes a node's registration, status, heartbeat, usage,
// assignments, overlay record, subnet and instance addresses in one
// transaction; the leader then places its Service instances elsewhere and
// the subnet is free for another node. An unknown node is an error
// wrapping ErrNotFound.
func (r *Repo) DeleteNode(ctx context.Context, name string) error {
	key := NodeRegistrationKey(name)
	ops := []store.Op{
		{Type: store.OpDelete, Key: key},
		{Type: store.OpDelete, Key: NodeStatusKey(name)},
		{Type: store.OpDelete, Key: NodeHeartbeatKey(name)},
		{Type: store.OpDelete, Key: NodeUsageKey(name)},
		{Type: store.OpDeletePrefix, Key: NodeAssignmentsPrefix(name)},
		{Type: store.OpDeletePrefix, Key: NodeNetworkPrefix(name)},
		{Type: store.OpDeletePrefix, Key: NodeIPAMPrefix(name)},
	}
	nn, err := r.GetNodeNetwork(ctx, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	if nn != nil && nn.Subnet.IsValid() {
		ops = append(ops, store.Op{Type: store.OpDelete, Key: SubnetKey(nn.Subnet)})
	}
	// The registration must exist: version 0 would mean it does not.
	ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: key, ExpectedVersion: 0}}, nil, ops)
	if err != nil {
		return fmt.Errorf("delete node %q: %w", name, err)
	}
	if ok {
		return fmt.Errorf("node %q: %w", name, ErrNotFound)
	}
	return nil
}

// GetNodeStatus returns a node's last reported status.
func (r *Repo) GetNodeStatus(ctx context.Context, node string) (*api.NodeStatus, error) {
	var st api.NodeStatus
	ver, err := r.getJSON(ctx, NodeStatusKey(node), &st)
	if err != nil {
		return nil, fmt.Errorf("read status of node %q: %w", node, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("status of node %q: %w", node, ErrNotFound)
	}
	return &st, nil
}

// ListNodeStatuses returns every node's last reported status.
func (r *Repo) ListNodeStatuses(ctx context.Context) ([]api.NodeStatus, error) {
	nodes, err := r.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []api.NodeStatus
	for _, n := range nodes {
		if n.Status != nil {
			out = append(out, *n.Status)
		}
	}
	return out, nil
}
