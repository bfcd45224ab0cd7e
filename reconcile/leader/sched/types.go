package sched

import (
	"fmt"
	"net/netip"

	"kat.dws.rip/kat/quadlet"
)

// Taint effects (Taint.Effect, quadlet.Toleration.Effect). Taints of other
// effects are ignored.
const (
	// NoSchedule keeps instances that do not tolerate the taint off the node.
	NoSchedule = "NoSchedule"
	// PreferNoSchedule makes the node the last choice of instances that do
	// not tolerate the taint.
	PreferNoSchedule = "PreferNoSchedule"
)

// Taint marks a node so that only workloads tolerating it run there.
type Taint struct {
	Key    string
	Value  string
	Effect string
}

// String returns the taint as kubectl writes it: "key=value:Effect", or
// "key:Effect" without a value.
func (t Taint) String() string {
	if t.Value == "" {
		return t.Key + ":" + t.Effect
	}
	return t.Key + "=" + t.Value + ":" + t.Effect
}

// GPU is one GPU of a node.
type GPU struct {
	// Index is the GPU's index as the node reports it; a Placement names
	// the GPU it takes by Index.
	Index int
	// Driver is "nvidia" or "amd".
	Driver string
	// VRAMMiB is the GPU's memory in MiB.
	VRAMMiB int
	// InUse is true when an instance already holds the GPU.
	InUse bool
}

// Node is a candidate node and what is already placed on it.
type Node struct {
	// Name is the node's name, unique in the cluster.
	Name string
	// Labels are matched against a request's node selector.
	Labels map[string]string
	// Taints repel instances that do not tolerate them.
	Taints []Taint
	// Ready is true while the node heartbeats; a node that is not ready
	// gets no instance.
	Ready bool
	// Cordoned is true when the operator took the node out of scheduling.
	Cordoned bool
	// CPU is the node's allocatable CPU in millicores.
	CPU int64
	// Memory is the node's allocatable memory in bytes.
	Memory int64
	// GPUs are the node's GPUs; each instance asking for a GPU takes one.
	GPUs []GPU
	// Used is what the instances already on the node request.
	Used Usage
	// Subnet is the node's overlay subnet: each instance placed on the
	// node takes one of its addresses, so a node without FreeIPs fits no
	// more. Default invalid: the node's instances get no address and
	// addresses do not limit them (a cluster without the overlay).
	Subnet netip.Prefix
	// FreeIPs is how many instance addresses of Subnet no instance holds.
	FreeIPs int
	// NoSubnet marks a node that should have a Subnet but has none yet
	// (the overlay is on, the leader has not given it one): it fits no
	// instance until it has.
	NoSubnet bool
}

// Usage is what the instances on a node request.
type Usage struct {
	// CPU is the sum of their CPU requests in millicores.
	CPU int64
	// Memory is the sum of their memory requests in bytes.
	Memory int64
	// Instances counts them by workload key "ns/name".
	Instances map[string]int
}

// Request asks for instances of one workload.
type Request struct {
	// Key is the workload's "ns/name".
	Key string
	// Type is quadlet.TypeService, TypeJob or TypeDaemonService. A
	// DaemonService ignores Count: it gets one instance on every eligible
	// node.
	Type string
	// CPU is each instance's CPU request in millicores; 0 asks for none.
	CPU int64
	// Memory is each instance's memory request in bytes; 0 asks for none.
	Memory int64
	// NodeSelector limits the instances to nodes with all of these labels;
	// nil: any node.
	NodeSelector map[string]string
	// Tolerations are the taints the instances tolerate (operator Exists
	// or Equal, empty meaning Exists; an empty key with Exists matches every
	// taint; an empty effect matches every effect).
	Tolerations []quadlet.Toleration
	// GPU asks for one GPU per instance; nil: none.
	GPU *quadlet.GPU
	// Count is how many new instances to place.
	Count int
	// Avoid are nodes the instances go to only when no other fits, like
	// a node with an untolerated PreferNoSchedule taint: those where the
	// instances they replace failed. nil: none.
	Avoid map[string]bool
}

// NewRequest returns the request for count new instances of the workload
// key ("ns/name") with the given parsed spec. A request left empty takes
// its limit, as quadlet's defaults already do.
func NewRequest(key string, spec *quadlet.WorkloadSpec, count int) (Request, error) {
	res := spec.Container.Resources
	req := Request{
		Key: key, Type: spec.Type, NodeSelector: spec.NodeSelector, Tolerations: spec.Tolerations,
		GPU: res.GPU, Count: count,
	}
	var err error
	if req.CPU, err = quantity(res.Requests.CPU, res.Limits.CPU, quadlet.ParseCPU); err != nil {
		return Request{}, fmt.Errorf("request of workload %s: %w", key, err)
	}
	if req.Memory, err = quantity(res.Requests.Memory, res.Limits.Memory, quadlet.ParseMemory); err != nil {
		return Request{}, fmt.Errorf("request of workload %s: %w", key, err)
	}
	return req, nil
}

// quantity parses request, or limit when request is empty; neither is 0.
func quantity(request, limit string, parse func(string) (int64, error)) (int64, error) {
	if request == "" {
		request = limit
	}
	if request == "" {
		return 0, nil
	}
	return parse(request)
}

// Placement is one new instance on a node.
type Placement struct {
	// Node is the node's name.
	Node string
	// GPU is the Index of the GPU the instance takes, or -1 when it asks
	// for none.
	GPU int
}

// Result is what Place decided.
type Result struct {
	// Placements are the new instances, in the order they were placed.
	Placements []Placement
	// Unplaced counts the instances that fit on no node: they stay
	// Pending. For a DaemonService, the nodes that pass every rule but
	// lack the room (CPU, memory or a free GPU) for its instance.
	Unplaced int
	// Reason says, when Unplaced > 0, why no node took them, counting the
	// nodes by the first rule they failed once the others were placed:
	// "3 nodes: 2 insufficient memory, 1 taint dedicated=gpu:NoSchedule".
	// For a DaemonService it explains the nodes left out, if any.
	Reason string
	// Cause is the rule that ruled out the most nodes, as a metric label:
	// "insufficient_memory", "taint", "no_gpu", ...; "no_nodes" without
	// any. Set with Reason.
	Cause string
}
