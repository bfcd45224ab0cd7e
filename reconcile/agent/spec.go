package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/agent/containerspec"
	"kat.dws.rip/kat/runtime"
)

// NewSpecBuilder returns the SpecBuilder of a node: it maps an assignment to
// its container with containerspec.For, creating the host side of its
// volumes first (under volumeBase). Every container gets its workload's
// explicit id map, the assignment's user namespace slot of ids, so every
// instance of the workload shares the map and its volumes and container
// root is never host root. An assignment without a slot, a slot outside
// ids, or ids nil (the node has no sub-id range) is an error, never
// Podman's --userns=auto: Podman 4.3.1 hangs when an auto create runs
// beside other container operations (see runtime.PodmanConfig.AutoUserNSLock).
func NewSpecBuilder(node, volumeBase string, ids *runtime.SubIDRange) SpecBuilder {
	return NewSpecBuilderWithSecrets(node, volumeBase, ids, SecretsLayout{})
}

// SecretsLayout is where an agent keeps its instances' secrets: the
// agent's tmpfs (AgentConfig.SecretsDir) and the kat-agent program that
// sets secret environment variables inside containers.
type SecretsLayout struct {
	Dir, Agent string
	// AgentProblem says why Agent is empty: secret environment variables
	// then fail with it.
	AgentProblem string
}

// NewSpecBuilderWithSecrets is NewSpecBuilder for an agent that holds
// secrets: a workload using any gets the mounts of its instance's
// directory under layout.Dir (written by the agent before).
func NewSpecBuilderWithSecrets(node, volumeBase string, ids *runtime.SubIDRange, layout SecretsLayout) SpecBuilder {
	return func(a api.Assignment, q *quadlet.Quadlet, in SpecInputs) (runtime.ContainerSpec, error) {
		inst := containerspec.Instance{
			ID: a.InstanceID, Node: node, Generation: a.Generation, SpecHash: a.SpecHash, SourceCommit: a.SourceCommit,
			Image: a.Image, VolumeBasePath: volumeBase, HostPorts: in.HostPorts,
		}
		if layout.Dir != "" && len(q.Workload.Spec.SecretNames()) > 0 {
			inst.Secrets = &containerspec.SecretPaths{Dir: filepath.Join(layout.Dir, a.InstanceID), Agent: layout.Agent,
				AgentProblem: layout.AgentProblem, Image: in.Image}
		}
		m, err := idMapOf(a, ids)
		if err != nil {
			return runtime.ContainerSpec{}, err
		}
		inst.IDMap = m
		vols, err := containerspec.VolumePaths(q, inst)
		if err != nil {
			return runtime.ContainerSpec{}, err
		}
		if err := containerspec.PrepareVolumes(vols); err != nil {
			return runtime.ContainerSpec{}, err
		}
		return containerspec.For(q, inst)
	}
}

// ErrNoUserNS means a container cannot be given its workload's uid map.
var ErrNoUserNS = errors.New("no user namespace for the container")

// idMapOf returns the uid map of a's slot in ids.
func idMapOf(a api.Assignment, ids *runtime.SubIDRange) (*runtime.IDMap, error) {
	switch {
	case ids == nil:
		return nil, fmt.Errorf("%w: the node has no sub-id range for user %q in /etc/subuid and /etc/subgid (run scripts/install-prereqs.sh, then restart the agent)", ErrNoUserNS, "containers")
	case a.UserNSSlot == nil:
		return nil, fmt.Errorf("%w: assignment %s has no userNSSlot (a leader older than slots wrote it; delete and re-apply the workload)", ErrNoUserNS, a.InstanceID)
	}
	m, ok := ids.Map(*a.UserNSSlot)
	if !ok {
		return nil, fmt.Errorf("%w: userNSSlot %d of assignment %s is outside the node's sub-id range %d:%d (%d slots)", ErrNoUserNS, *a.UserNSSlot, a.InstanceID, ids.Start, ids.Count, ids.Slots())
	}
	return m, nil
}
