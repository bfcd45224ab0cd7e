package api

import (
	"net/netip"
	"time"
)

// Assignment is one instance a node must run: the key
// /kat/assignments/{node}/{instanceID}. It is written once by the leader and
// never changed but for LeavingAt: a changed spec is a new instance.
type Assignment struct {
	// InstanceID is {workload}-{instance template[:8]}-{suffix}, unique in
	// the cluster (docs/architecture.md "Identity").
	InstanceID string `json:"instanceID"`
	// Node is the node that runs the instance.
	Node       string `json:"node"`
	Namespace  string `json:"namespace"`
	Workload   string `json:"workload"`
	Type       string `json:"type"`
	Generation int64  `json:"generation"`
	SpecHash   string `json:"specHash"`
	// TemplateHash is the spec hash without the replica count: instances of
	// the same template survive scaling.
	TemplateHash string `json:"templateHash"`
	// Image is the image to run.
	Image string `json:"image"`
	// Ports are the container ports of VirtualLoadBalancer.kat.
	Ports []int `json:"ports,omitempty"`
	// RestartPolicy is workload.kat's restartPolicy.condition.
	RestartPolicy string `json:"restartPolicy"`
	// SourceCommit is the commit of the config repo the spec came from, when
	// Git owns the workload; for a workload built from an app repository it
	// is the app commit the leader resolved (Build.Commit).
	SourceCommit string `json:"sourceCommit,omitempty"`
	// Build, for a workload whose source is an app repository, is what the
	// node builds Image from instead of pulling it. Default nil: pull.
	Build *BuildRef `json:"build,omitempty"`
	// Files are the Quadlet files of the generation, so an agent needs no
	// other key to build the container.
	Files     map[string][]byte `json:"files,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	// UserNSSlot is the workload's slot of user namespace ids: its
	// containers map uid and gid 0 to the start of the node's sub-id range
	// plus slot times 65536. Every instance of a workload has the same slot
	// and no two workloads share one while either has assignments. The
	// leader sets it on every assignment it writes; an agent refuses to
	// run an assignment without one (written before slots existed).
	UserNSSlot *int `json:"userNSSlot,omitempty"`
	// CPUMillis and MemoryBytes are what the instance requests (its
	// workload's requests, else its limits), as the scheduler counted them
	// against the node's allocatable; 0: none.
	CPUMillis   int64 `json:"cpuMillis,omitempty"`
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// GPU is the index of the node's GPU the instance holds; nil: none.
	GPU *int `json:"gpu,omitempty"`
	// Run is, for an instance of a Job, the run it belongs to (JobRun.Run);
	// "" for other workloads.
	Run string `json:"run,omitempty"`
	// IP is the instance's overlay address, from its node's subnet; the
	// leader records it under IPAMKey in the transaction that writes the
	// assignment and frees it in the one that deletes it. Invalid (omitted)
	// on an assignment written before IPAM.
	IP netip.Addr `json:"ip,omitzero"`
	// LeavingAt, when set, is when the leader took the instance out of
	// service: it is in no list of ready instances (workload status, DNS)
	// from then on, and its assignment is deleted (the agent stops it)
	// once the drain delay has passed. The one change ever made to an
	// assignment; agents ignore it. Zero: in service.
	LeavingAt time.Time `json:"leavingAt,omitzero"`
}

// Leaving reports whether the instance has been taken out of service.
func (a Assignment) Leaving() bool { return !a.LeavingAt.IsZero() }

// BuildRef names one commit of an app repository to build.
type BuildRef struct {
	// Repository is workload.kat's spec.source.git.repository.
	Repository string `json:"repository"`
	// Commit is the full commit hash the leader resolved the ref to.
	Commit string `json:"commit"`
}
