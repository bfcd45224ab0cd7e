package api

import (
	"net"
	"net/netip"
	"strconv"
	"time"
)

// NodeRegistration is a node's record (/kat/nodes/registration/{node}),
// written when it joins (or, for the first leader, at init) and changed by
// the operator's verbs (cordon, drain, label, taint).
type NodeRegistration struct {
	Name             string            `json:"name"`
	UID              string            `json:"uid"`
	AdvertiseAddress string            `json:"advertiseAddress"`
	APIPort          int               `json:"apiPort"`
	AgentPort        int               `json:"agentPort"`
	Labels           map[string]string `json:"labels,omitempty"`
	JoinedAt         time.Time         `json:"joinedAt"`
	// Taints repel instances that do not tolerate them.
	Taints []Taint `json:"taints,omitempty"`
	// Unschedulable is set by katcall cordon (and drain): the node gets no
	// new instance; what runs there stays.
	Unschedulable bool `json:"unschedulable"`
	// Draining is set by katcall drain: Service and DaemonService instances
	// are moved off the node, Job instances run to their end.
	Draining bool `json:"draining"`
	// EtcdMember marks a node that is a member of the cluster's etcd
	// quorum: a leader candidate that serves the API (katcall and webhook
	// senders may use any member's address).
	EtcdMember bool `json:"etcdMember"`
	// MayDetach marks a worker that joined with --parent-cluster-name: lost,
	// it runs on its own, detached, and comes back (docs/detached.md), so
	// the leader waits for its Job instances rather than giving them up.
	// Default false.
	MayDetach bool `json:"mayDetach,omitempty"`
	// DepartedAt is when the node's agent said it leaves for good (its
	// departure signal, SIGUSR1): from then the node is NotReady, so its
	// Service instances move at once, until an agent started later than
	// the one that departed reports (Departed). Default nil.
	DepartedAt *time.Time `json:"departedAt,omitempty"`
	// DepartedAgentStart is the start time (NodeStatus.AgentStartedAt) of
	// the agent that departed. Default zero.
	DepartedAgentStart time.Time `json:"departedAgentStart,omitzero"`
}

// Departed reports whether the node departed and no agent started since
// reported: agentStartedAt is the start time of the agent of its last
// status. No clocks are compared, only the one agent's own start time.
func (r NodeRegistration) Departed(agentStartedAt time.Time) bool {
	return r.DepartedAt != nil && agentStartedAt.Equal(r.DepartedAgentStart)
}

// NodeDeparture is the body of POST /v1alpha1/nodes/{node}/depart: the
// node's agent leaves for good.
type NodeDeparture struct {
	// AgentStartedAt is when the departing agent started: an agent started
	// at another time (the node came back) makes the node Ready again.
	AgentStartedAt time.Time `json:"agentStartedAt"`
}

// APIURL is the URL of the node's API server (an etcd member's), "" when
// it has no API port.
func (r NodeRegistration) APIURL() string {
	if r.APIPort == 0 {
		return ""
	}
	return "https://" + net.JoinHostPort(r.AdvertiseAddress, strconv.Itoa(r.APIPort))
}

// Taint effects.
const (
	TaintNoSchedule       = "NoSchedule"
	TaintPreferNoSchedule = "PreferNoSchedule"
)

// NodeHeartbeat is a node's last heartbeat: when it beat, in Unix seconds
// (the time its status says).
type NodeHeartbeat struct {
	Timestamp int64 `json:"timestamp"`
}

// NodeNetwork is a node's place in the overlay: the subnet the leader gave
// it and its WireGuard identity.
type NodeNetwork struct {
	Node string
	// Subnet is the node's share of clusterCIDR: its instances' addresses
	// and its overlay address come from it.
	Subnet netip.Prefix
	// PublicKey is the base64 WireGuard public key; "" until the node
	// reported one.
	PublicKey string
	// Endpoint is host:port where the node's WireGuard device listens; ""
	// until the node reported one.
	Endpoint string
}

// OverlayIP is the node's own address in the overlay: the first address of
// its subnet, where its DNS server listens and its containers' gateway is.
func (n NodeNetwork) OverlayIP() netip.Addr { return n.Subnet.Masked().Addr().Next() }

// Taint marks a node so that only instances tolerating it are placed there.
// Effect is NoSchedule or PreferNoSchedule.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// String is the taint as katcall taint takes it: "key=value:Effect", or
// "key:Effect" without a value.
func (t Taint) String() string {
	if t.Value == "" {
		return t.Key + ":" + t.Effect
	}
	return t.Key + "=" + t.Value + ":" + t.Effect
}

// ResourceList is an amount of CPU and memory in the spec's quantity syntax.
type ResourceList struct {
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
}

// NodeResources is a node's capacity and what is allocatable to workloads.
type NodeResources struct {
	Capacity    ResourceList `json:"capacity"`
	Allocatable ResourceList `json:"allocatable"`
}

// NodeStatus is a node's heartbeat, the body of
// POST /v1alpha1/nodes/{node}/status.
type NodeStatus struct {
	NodeName  string        `json:"nodeName"`
	NodeUID   string        `json:"nodeUID"`
	Timestamp int64         `json:"timestamp"`
	Resources NodeResources `json:"resources"`
	// WorkloadInstances are the instances assigned to the node as the agent
	// sees them.
	WorkloadInstances []InstanceStatus `json:"workloadInstances,omitempty"`
	// GPUs are the GPUs nvidia-smi and rocm-smi report; empty without
	// one.
	GPUs []GPU `json:"gpus,omitempty"`
	// Conditions report node problems, such as a missing container runtime
	// (type RuntimeReady).
	Conditions []Condition `json:"conditions,omitempty"`
	// Overlay is the node's WireGuard identity; the leader records it
	// when it differs from what the cluster holds (a node that joined
	// before it had one, or whose port changed). Nil: no overlay.
	Overlay *NodeOverlay `json:"overlay,omitempty"`
	// AgentStartedAt is when the reporting kat-agent process started: a
	// departed node whose agent started again is back. Default zero (an
	// agent that predates it).
	AgentStartedAt time.Time `json:"agentStartedAt,omitzero"`
	// Usage is what the node and its containers used, as the agent last
	// sampled it. It changes with every report, so the leader keeps it
	// apart from the rest of the status (written with the heartbeat, never
	// waking a loop). Nil: not sampled (an older agent).
	Usage *NodeUsage `json:"usage,omitempty"`
	// Ingress is what the node's ingress proxy applied; nil on a node
	// without a proxy instance.
	Ingress *IngressProxyStatus `json:"ingress,omitempty"`
}

// NodeUsage is what a node and its containers used, sampled by its agent
// from the kernel's counters (the node's /proc, each container's cgroup and
// network namespace). Byte counters count from the node's boot or the
// container's start; CPU and the rates are averages over the interval
// between the last two samples.
type NodeUsage struct {
	// SampledAt is when the sample was taken, in Unix seconds.
	SampledAt int64 `json:"sampledAt"`
	ResourceUsage
	// Containers are the node's running containers of instances.
	Containers []ContainerUsage `json:"containers,omitempty"`
	// OverlayPeers are the node's WireGuard peers as its overlay device
	// saw them at the sample; none without an overlay device.
	OverlayPeers []OverlayPeer `json:"overlayPeers,omitempty"`
}

// OverlayPeer is one peer of a node's WireGuard device.
type OverlayPeer struct {
	// Node is the peer's node; "" for a peer the agent did not set.
	Node      string `json:"node"`
	PublicKey string `json:"publicKey"`
	// Endpoint is the peer's current address and port; "" before any.
	Endpoint string `json:"endpoint,omitempty"`
	// LastHandshake is the last completed handshake with the peer; zero
	// (omitted) for none. WireGuard renews a session every two minutes
	// while traffic flows, so one much older means no traffic or no path.
	LastHandshake time.Time `json:"lastHandshake,omitzero"`
	// RxBytes and TxBytes count the bytes received from and sent to the
	// peer since the device opened.
	RxBytes int64 `json:"rxBytes"`
	TxBytes int64 `json:"txBytes"`
}

// ResourceUsage is what a node or a container used.
type ResourceUsage struct {
	// CPUMillis is the CPU used over the last interval, in thousandths of
	// a core.
	CPUMillis int64 `json:"cpuMillis"`
	// MemoryBytes is the memory in use: a node's total less what is
	// available, a container's cgroup's usage.
	MemoryBytes int64 `json:"memoryBytes"`
	// DiskReadBytes and DiskWriteBytes count block-device bytes read and
	// written.
	DiskReadBytes  int64 `json:"diskReadBytes"`
	DiskWriteBytes int64 `json:"diskWriteBytes"`
	// NetworkRxBytes and NetworkTxBytes count bytes received and sent on
	// every interface but loopback (a node's, or the container's network
	// namespace's).
	NetworkRxBytes int64 `json:"networkRxBytes"`
	NetworkTxBytes int64 `json:"networkTxBytes"`
}

// ContainerUsage is what one instance's container used.
type ContainerUsage struct {
	Namespace  string `json:"namespace"`
	Workload   string `json:"workload"`
	InstanceID string `json:"instanceID"`
	ResourceUsage
}

// NodeOverlay is a node's place in the WireGuard overlay as the node
// reports it: its public key and the port at its advertise address.
type NodeOverlay struct {
	// PublicKey is the base64 WireGuard public key.
	PublicKey string `json:"publicKey"`
	// Port is the UDP port the device listens on.
	Port int `json:"port"`
}

// GPU is one GPU of a node.
type GPU struct {
	// Index identifies the GPU on its node (Assignment.GPU): NVIDIA's
	// first, then AMD's.
	Index int    `json:"index"`
	Name  string `json:"name"`
	// Driver is "nvidia" or "amd".
	Driver  string `json:"driver"`
	VRAMMiB int    `json:"vramMiB"`
	// Device is the GPU's fully qualified CDI device name, the one its
	// vendor's CDI spec gives it ("nvidia.com/gpu=0", "amd.com/gpu=0"): how
	// an instance holding the GPU gets it. "" from an agent older than CDI.
	Device string `json:"device,omitempty"`
}

// Node states.
const (
	NodeReady    = "Ready"
	NodeNotReady = "NotReady"
	NodeUnknown  = "Unknown"
)

// Node is a node as the API returns it: its registration and its last
// status report (both the records themselves, the report's instances left
// out), with what the leader placed on it.
type Node struct {
	NodeRegistration
	// NodeStatus is what the node last reported: its capacity and
	// allocatable resources, GPUs and overlay, and conditions such as
	// RuntimeReady=False when it cannot run containers; zero before its
	// first report. WorkloadInstances is left out (the workloads' status
	// shows them).
	NodeStatus
	// Status is NodeReady, NodeNotReady, or NodeUnknown for a node that
	// never beat.
	Status string `json:"status"`
	// Leader marks the node that leads the cluster.
	Leader        bool       `json:"leader"`
	LastHeartbeat *time.Time `json:"lastHeartbeat,omitempty"`
	// Instances is how many instances the leader has placed on the node
	// (its assignments), ended Job instances included.
	Instances int `json:"instances"`
	// Requested is the sum of what the instances placed on the node request.
	Requested NodeRequested `json:"requested"`
	// Active counts, by workload type (Service, DaemonService, Job), the
	// instances placed on the node that have not ended: every Service and
	// DaemonService instance, and the Job instances its agent has not
	// reported Succeeded or Failed. A drained node has none.
	Active map[string]int `json:"active,omitempty"`
	// HeartbeatAgeSeconds is how old LastHeartbeat was when the server
	// answered; absent when the node never beat.
	HeartbeatAgeSeconds *int64 `json:"heartbeatAgeSeconds,omitempty"`
}

// Node schedulability, as StatusText shows it beside the readiness.
const (
	NodeCordoned = "Cordoned"
	NodeDraining = "Draining"
	// NodeDeparted follows NotReady for a node whose agent departed.
	NodeDeparted = "Departed"
)

// StatusText is the node's readiness with its schedulability, as katcall get
// nodes shows it: "Ready", "NotReady,Cordoned", "Ready,Draining".
func (n Node) StatusText() string {
	switch {
	case n.Departed(n.AgentStartedAt):
		return n.Status + "," + NodeDeparted
	case n.Draining:
		return n.Status + "," + NodeDraining
	case n.Unschedulable:
		return n.Status + "," + NodeCordoned
	}
	return n.Status
}

// NodeRequested is what the instances placed on a node request in total.
type NodeRequested struct {
	CPUMillis   int64 `json:"cpuMillis"`
	MemoryBytes int64 `json:"memoryBytes"`
	// GPUs is how many of the node's GPUs instances hold.
	GPUs int `json:"gpus"`
}

// TaintChange is the body of PATCH /v1alpha1/nodes/{node}/taints, with
// kubectl taint's semantics.
type TaintChange struct {
	// Add adds taints; one with the key and effect of a taint the node has
	// replaces it only with Overwrite (else the request is refused).
	Add []Taint `json:"add,omitempty"`
	// Remove removes, per item, the taint of that key and effect, or with
	// no effect every taint of that key; one that matches nothing is
	// refused.
	Remove []Taint `json:"remove,omitempty"`
	// Overwrite lets Add replace a taint of the same key and effect.
	Overwrite bool `json:"overwrite,omitempty"`
}
