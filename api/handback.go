package api

// HandBack is what a detached node hands its cluster as it rejoins
// (POST /v1alpha1/nodes/{node}/handback, docs/detached.md): the workloads
// created on it while it was detached.
type HandBack struct {
	Workloads []HandBackWorkload `json:"workloads"`
}

// HandBackWorkload is one workload a detached node hands back: its Quadlet
// files as applied there (pinned to the node by its nodeSelector), and its
// instances that run on the node, which the cluster adopts as they are.
type HandBackWorkload struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Files     map[string][]byte `json:"files"`
	// Instances are the node's assignments of the workload (without their
	// files, which are Files): the cluster records them as its own, same
	// instance ID, address and user-namespace slot, so the node's agent
	// keeps their containers. Empty: the cluster places new instances.
	Instances []Assignment `json:"instances,omitempty"`
}

// HandBackResult says what the cluster did with each workload handed
// back: Accepted ones are the cluster's now (owned by the API, pinned to
// the node), each listed as "namespace/name"; a Conflict is a workload
// whose name the cluster uses already, left as the cluster has it.
type HandBackResult struct {
	Accepted  []string           `json:"accepted,omitempty"`
	Conflicts []HandBackConflict `json:"conflicts,omitempty"`
	// NotAdopted are the accepted workloads ("namespace/name") whose
	// instances the cluster could not take as they are (an address or
	// user-namespace slot the cluster gave out meanwhile), each with why:
	// the cluster places new instances of them, replacing the node's.
	NotAdopted map[string]string `json:"notAdopted,omitempty"`
}

// HandBackConflict is a workload the cluster did not take, and why.
type HandBackConflict struct {
	Workload string `json:"workload"`
	Reason   string `json:"reason"`
}
