package agent

import (
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// NewSpecBuilder returns the SpecBuilder of a node: it maps an assignment to
// its container with runtime.ContainerSpecFor, creating the host side of its
// volumes first (under volumeBase). An assignment with a user namespace slot
// gets its workload's explicit id map from ids, so every instance of the
// workload shares the map and its volumes; without a slot, or with ids nil,
// the container gets Podman's --userns=auto. Either way container root is
// never host root.
func NewSpecBuilder(node, volumeBase string, ids *runtime.SubIDRange, log zerolog.Logger) SpecBuilder {
	return func(a resources.Assignment, q *quadlet.Quadlet, hostPorts map[int]int) (runtime.ContainerSpec, error) {
		inst := runtime.Instance{
			ID: a.InstanceID, Node: node, Generation: a.Generation, SpecHash: a.SpecHash, SourceCommit: a.SourceCommit,
			Image: a.Image, VolumeBasePath: volumeBase, HostPorts: hostPorts,
		}
		if a.UserNSSlot != nil && ids != nil {
			m, ok := ids.Map(*a.UserNSSlot)
			if !ok {
				log.Warn().Str("instance", a.InstanceID).Int("slot", *a.UserNSSlot).Int64("slots", ids.Slots()).
					Msg("user namespace slot outside the sub-id range: using --userns=auto")
			}
			inst.IDMap = m
		}
		vols, err := runtime.VolumePaths(q, inst)
		if err != nil {
			return runtime.ContainerSpec{}, err
		}
		if err := runtime.PrepareVolumes(vols); err != nil {
			return runtime.ContainerSpec{}, err
		}
		return runtime.ContainerSpecFor(q, inst)
	}
}
