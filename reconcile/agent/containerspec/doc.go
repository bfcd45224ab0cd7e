// Package containerspec maps a workload's Quadlet to the container of one of
// its instances on a node: the runtime.ContainerSpec the agent runs, and the
// host side of its volumes.
//
//	inst := containerspec.Instance{ID: a.InstanceID, Node: "n1", VolumeBasePath: "/var/lib/kat/volumes"}
//	vols, err := containerspec.VolumePaths(q, inst)
//	if err == nil {
//		err = containerspec.PrepareVolumes(vols)
//	}
//	spec, err := containerspec.For(q, inst)
//
// # From a workload to a container
//
// For turns a parsed workload (quadlet.Quadlet) and an Instance (instance
// ID, node, generation, spec hash, source commit, the agent's
// volumeBasePath) into a runtime.ContainerSpec: command, args, env, the
// VirtualLoadBalancer's ports published on the host, CPU and memory limits,
// volume mounts and labels. It is pure. Errors wrap runtime.ErrInvalidSpec
// and name the field: retrying cannot help, the instance fails.
//
// # Volumes
//
// Before the container is created, PrepareVolumes(VolumePaths(q, inst))
// makes the host side exist: SimpleClusterStorage directories under
// {volumeBasePath}/{namespace}/{workload}/{volume}, HostMount paths checked
// or created according to their ensureType, and sub-paths (never through a
// symbolic link). A host that is not as a volume requires is an error
// wrapping ErrVolumeNotReady: the node, not the spec, must change.
//
// SimpleClusterStorage mounts are chowned to the container's root user when
// the container is created (podman's U option), so container root can write
// them under a user namespace. Replicas of one workload on one node share the
// directory: with the workload's explicit id map (runtime.ContainerSpec.IDMap)
// they share its owner too; under --userns=auto each gets its own uid range
// and the one created last owns it. HostMounts are mounted as they are: a
// writable one must allow the container's unprivileged host uids.
package containerspec
