package api

// HandBack is what a detached node hands its cluster as it rejoins
// (POST /v1alpha1/nodes/{node}/handback, docs/detached.md): the workloads
// created on it while it was detached.
type HandBack struct {
	Workloads []HandBackWorkload `json:"workloads"`
}

// HandBackWorkload is one workload a detached node hands back: its Quadlet
// files as applied there (pinned to the node by its nodeSelector).
type HandBackWorkload struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	Files     map[string][]byte `json:"files"`
}

// HandBackResult says what the cluster did with each workload handed
// back: Accepted ones are the cluster's now (owned by the API, pinned to
// the node), each listed as "namespace/name"; a Conflict is a workload
// whose name the cluster uses already, left as the cluster has it.
type HandBackResult struct {
	Accepted  []string           `json:"accepted,omitempty"`
	Conflicts []HandBackConflict `json:"conflicts,omitempty"`
}

// HandBackConflict is a workload the cluster did not take, and why.
type HandBackConflict struct {
	Workload string `json:"workload"`
	Reason   string `json:"reason"`
}
