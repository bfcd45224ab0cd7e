package runtime

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"kat.dws.rip/kat/quadlet"
)

// Instance identifies one instance of a workload on a node: what
// ContainerSpecFor needs besides the workload itself.
type Instance struct {
	// ID is the instance ID, required. It is also the container name and,
	// when at most 63 characters, its host name.
	ID string
	// Node is the node the instance runs on. Default "": no LabelNode.
	Node string
	// Generation is the workload generation the instance runs.
	Generation int64
	// SpecHash is the workload's spec hash.
	SpecHash string
	// SourceCommit is the Git commit the spec came from. Default "": no
	// LabelSourceCommit.
	SourceCommit string
	// Image is the image to run; required for a workload built from Git
	// (the build's tag), and overrides spec.source.image otherwise.
	// Default: spec.source.image.
	Image string
	// VolumeBasePath is the agent's volumeBasePath, required when the
	// workload has SimpleClusterStorage volumes.
	VolumeBasePath string
	// PortHostIP is the host address ports are published on. Default "":
	// every address.
	PortHostIP string
	// HostPorts maps a container port to the host port it is published
	// on. Default: the container port itself.
	HostPorts map[int]int
	// UserNS is the container's user namespace mode. Default "": the
	// runtime's default (for Podman "auto").
	UserNS string
	// IDMap, when set, is the workload's explicit user namespace (see
	// ContainerSpec.IDMap) and UserNS is ignored. Default nil.
	IDMap *IDMap
}

// ErrVolumeNotReady means a volume's host path is missing or of the wrong
// type: the node, not the spec, must change (or PrepareVolumes create it).
var ErrVolumeNotReady = errors.New("runtime: volume not ready")

// Host path kinds of HostMount.EnsureType.
const (
	EnsureNone              = ""
	EnsureDirectoryOrCreate = "DirectoryOrCreate"
	EnsureDirectory         = "Directory"
	EnsureFileOrCreate      = "FileOrCreate"
	EnsureFile              = "File"
	EnsureSocket            = "Socket"
)

// VolumePath is the host side of one volume of an instance: where it lives
// and what must be true of it before the container starts.
type VolumePath struct {
	// Name is the volume's name in the workload.
	Name string
	// Path is the host path of the volume's root.
	Path string
	// Ensure is the check or creation PrepareVolumes performs: an Ensure*
	// value. SimpleClusterStorage is EnsureDirectoryOrCreate.
	Ensure string
	// ClusterStorage marks a SimpleClusterStorage volume, which is
	// chowned to the container's root user when mounted.
	ClusterStorage bool
	// SubPaths are the volume's sub-paths mounted by the container,
	// relative to Path; PrepareVolumes creates them as directories.
	SubPaths []string
}

// SimpleClusterStoragePath is where a SimpleClusterStorage volume lives on
// a node: {volumeBasePath}/{namespace}/{workload}/{volume}. Every instance of
// the workload on the node shares it.
func SimpleClusterStoragePath(volumeBasePath, namespace, workload, volume string) string {
	return filepath.Join(volumeBasePath, namespace, workload, volume)
}

// VolumePaths returns the host side of every volume of q for inst, in the
// order of spec.volumes. It touches nothing.
func VolumePaths(q *quadlet.Quadlet, inst Instance) ([]VolumePath, error) {
	spec := &q.Workload.Spec
	where := q.Namespace() + "/" + q.Name()
	var vols []VolumePath
	for i, v := range spec.Volumes {
		field := fmt.Sprintf("spec.volumes[%d]", i)
		vp := VolumePath{Name: v.Name}
		switch {
		case v.SimpleClusterStorage != nil:
			if inst.VolumeBasePath == "" || !filepath.IsAbs(inst.VolumeBasePath) {
				return nil, fmt.Errorf("%w: workload %s: %s: simpleClusterStorage needs the agent's volumeBasePath, an absolute path (got %q)",
					ErrInvalidSpec, where, field, inst.VolumeBasePath)
			}
			vp.Path = SimpleClusterStoragePath(inst.VolumeBasePath, q.Namespace(), q.Name(), v.Name)
			vp.Ensure = EnsureDirectoryOrCreate
			vp.ClusterStorage = true
		case v.HostMount != nil:
			if !filepath.IsAbs(v.HostMount.HostPath) {
				return nil, fmt.Errorf("%w: workload %s: %s.hostMount.hostPath: %q is not an absolute path",
					ErrInvalidSpec, where, field, v.HostMount.HostPath)
			}
			vp.Path = filepath.Clean(v.HostMount.HostPath)
			switch t := v.HostMount.EnsureType; t {
			case EnsureNone, EnsureDirectoryOrCreate, EnsureDirectory, EnsureFileOrCreate, EnsureFile, EnsureSocket:
				vp.Ensure = t
			default:
				return nil, fmt.Errorf("%w: workload %s: %s.hostMount.ensureType: %q is not one of DirectoryOrCreate, Directory, FileOrCreate, File, Socket",
					ErrInvalidSpec, where, field, t)
			}
		default:
			return nil, fmt.Errorf("%w: workload %s: %s: neither simpleClusterStorage nor hostMount is set", ErrInvalidSpec, where, field)
		}
		vols = append(vols, vp)
	}
	for i, m := range spec.Container.VolumeMounts {
		if m.SubPath == "" {
			continue
		}
		field := fmt.Sprintf("spec.container.volumeMounts[%d].subPath", i)
		sub, err := cleanSubPath(m.SubPath)
		if err != nil {
			return nil, fmt.Errorf("%w: workload %s: %s: %w", ErrInvalidSpec, where, field, err)
		}
		vp := findVolume(vols, m.Name)
		if vp == nil {
			return nil, fmt.Errorf("%w: workload %s: spec.container.volumeMounts[%d].name: volume %q is not defined in spec.volumes",
				ErrInvalidSpec, where, i, m.Name)
		}
		switch vp.Ensure {
		case EnsureFile, EnsureFileOrCreate, EnsureSocket:
			return nil, fmt.Errorf("%w: workload %s: %s: volume %q is a %s, which has no sub-paths",
				ErrInvalidSpec, where, field, m.Name, strings.ToLower(vp.Ensure))
		}
		vp.SubPaths = append(vp.SubPaths, sub)
	}
	return vols, nil
}

func findVolume(vols []VolumePath, name string) *VolumePath {
	for i := range vols {
		if vols[i].Name == name {
			return &vols[i]
		}
	}
	return nil
}

// cleanSubPath checks a relative sub-path that stays inside its volume.
func cleanSubPath(s string) (string, error) {
	if filepath.IsAbs(s) {
		return "", fmt.Errorf("%q must be a relative path", s)
	}
	c := filepath.Clean(s)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") || strings.ContainsRune(s, 0) {
		return "", fmt.Errorf("%q must name a path inside the volume", s)
	}
	return c, nil
}

// ContainerSpecFor turns a workload and one instance's identity into the
// spec of its container: image, command, args, env, the ports of the
// VirtualLoadBalancer published on the host, CPU and memory limits, volume
// mounts, and KAT's labels. It is pure: PrepareVolumes makes the volumes'
// host paths exist. Errors wrap ErrInvalidSpec and name the field.
func ContainerSpecFor(q *quadlet.Quadlet, inst Instance) (ContainerSpec, error) {
	spec := &q.Workload.Spec
	ct := &spec.Container
	where := q.Namespace() + "/" + q.Name()
	if inst.ID == "" {
		return ContainerSpec{}, fmt.Errorf("%w: workload %s: instance id is required", ErrInvalidSpec, where)
	}
	image := inst.Image
	if image == "" {
		image = spec.Source.Image
	}
	if image == "" {
		return ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.source: no image to run (a workload built from git needs the built image)", ErrInvalidSpec, where)
	}
	cs := ContainerSpec{
		Name:    inst.ID,
		Image:   image,
		Command: ct.Command,
		Args:    ct.Args,
		UserNS:  inst.UserNS,
		IDMap:   inst.IDMap,
		Labels: map[string]string{
			LabelManaged:    "true",
			LabelNamespace:  q.Namespace(),
			LabelWorkload:   q.Name(),
			LabelInstance:   inst.ID,
			LabelSpecHash:   inst.SpecHash,
			LabelGeneration: strconv.FormatInt(inst.Generation, 10),
		},
	}
	if cs.IDMap != nil {
		cs.UserNS = ""
	}
	if inst.SourceCommit != "" {
		cs.Labels[LabelSourceCommit] = inst.SourceCommit
	}
	if inst.Node != "" {
		cs.Labels[LabelNode] = inst.Node
	}
	if len(inst.ID) <= 63 {
		cs.Hostname = inst.ID
	}
	for _, e := range ct.Env {
		cs.Env = append(cs.Env, EnvVar{Name: e.Name, Value: e.Value})
	}
	if lim := ct.Resources.Limits.CPU; lim != "" {
		m, err := quadlet.ParseCPU(lim)
		if err != nil {
			return ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.container.resources.limits.cpu: %w", ErrInvalidSpec, where, err)
		}
		cs.CPUMillis = m
	}
	if lim := ct.Resources.Limits.Memory; lim != "" {
		b, err := quadlet.ParseMemory(lim)
		if err != nil {
			return ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.container.resources.limits.memory: %w", ErrInvalidSpec, where, err)
		}
		cs.MemoryBytes = b
	}
	if lb := q.LoadBalancer; lb != nil {
		for _, p := range lb.Spec.Ports {
			host := p.ContainerPort
			if h, ok := inst.HostPorts[p.ContainerPort]; ok && h != 0 {
				host = h
			}
			proto := strings.ToLower(p.Protocol)
			if proto == "" {
				proto = "tcp"
			}
			cs.Ports = append(cs.Ports, PortMapping{HostIP: inst.PortHostIP, HostPort: host, ContainerPort: p.ContainerPort, Protocol: proto})
		}
	}
	vols, err := VolumePaths(q, inst)
	if err != nil {
		return ContainerSpec{}, err
	}
	for i, m := range ct.VolumeMounts {
		vp := findVolume(vols, m.Name)
		if vp == nil {
			return ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.container.volumeMounts[%d].name: volume %q is not defined in spec.volumes",
				ErrInvalidSpec, where, i, m.Name)
		}
		src := vp.Path
		if m.SubPath != "" {
			sub, _ := cleanSubPath(m.SubPath) // checked by VolumePaths
			src = filepath.Join(src, sub)
		}
		cs.Mounts = append(cs.Mounts, Mount{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly, Chown: vp.ClusterStorage && !m.ReadOnly})
	}
	if err := cs.Validate(); err != nil {
		return ContainerSpec{}, fmt.Errorf("workload %s: %w", where, err)
	}
	return cs, nil
}
