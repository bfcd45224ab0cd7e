package containerspec

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// Instance identifies one instance of a workload on a node: what
// For needs besides the workload itself.
type Instance struct {
	// ID is the instance ID, required. It is also the container name and,
	// when at most 63 characters, its host name.
	ID string
	// Node is the node the instance runs on. Default "": no runtime.LabelNode.
	Node string
	// Generation is the workload generation the instance runs.
	Generation int64
	// SpecHash is the workload's spec hash.
	SpecHash string
	// SourceCommit is the Git commit the spec came from. Default "": no
	// runtime.LabelSourceCommit.
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
	// runtime.ContainerSpec.IDMap) and UserNS is ignored. Default nil.
	IDMap *runtime.IDMap
	// Secrets is where the instance's secrets are on the node, required
	// when the workload uses any. Default nil.
	Secrets *SecretPaths
}

// SecretPaths are the host side of an instance's secrets.
type SecretPaths struct {
	// Dir is the instance's directory of the agent's tmpfs: Dir/env holds
	// one file per secret environment variable, Dir/vol/{volume} each
	// secret volume.
	Dir string
	// Agent is the kat-agent program (statically linked), the wrapper that
	// sets the secret environment variables inside the container; empty
	// when it cannot serve (AgentProblem says why).
	Agent, AgentProblem string
	// Image is what the image runs, which the wrapper runs in its place
	// when the workload gives no spec.container.command
	// (NeedsImageConfig). Default nil.
	Image *runtime.ImageConfig
}

// EnvDir is the directory of the instance's secret environment variables.
func (s *SecretPaths) EnvDir() string { return filepath.Join(s.Dir, "env") }

// VolumeDir is the directory of the instance's secret volume.
func (s *SecretPaths) VolumeDir(volume string) string { return filepath.Join(s.Dir, "vol", volume) }

// For turns a workload and one instance's identity into the
// spec of its container: image, command, args, env, the ports of the
// VirtualLoadBalancer published on the host, CPU and memory limits, volume
// mounts, and KAT's labels. It is pure: PrepareVolumes makes the volumes'
// host paths exist. Errors wrap runtime.ErrInvalidSpec and name the field.
func For(q *quadlet.Quadlet, inst Instance) (runtime.ContainerSpec, error) {
	spec := &q.Workload.Spec
	ct := &spec.Container
	where := q.Namespace() + "/" + q.Name()
	if inst.ID == "" {
		return runtime.ContainerSpec{}, fmt.Errorf("%w: workload %s: instance id is required", runtime.ErrInvalidSpec, where)
	}
	image := inst.Image
	if image == "" {
		image = spec.Source.Image
	}
	if image == "" {
		return runtime.ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.source: no image to run (a workload built from git needs the built image)", runtime.ErrInvalidSpec, where)
	}
	cs := runtime.ContainerSpec{
		Name:    inst.ID,
		Image:   image,
		Command: ct.Command,
		Args:    ct.Args,
		UserNS:  inst.UserNS,
		IDMap:   inst.IDMap,
		Labels: map[string]string{
			runtime.LabelManaged:    "true",
			runtime.LabelNamespace:  q.Namespace(),
			runtime.LabelWorkload:   q.Name(),
			runtime.LabelInstance:   inst.ID,
			runtime.LabelSpecHash:   inst.SpecHash,
			runtime.LabelGeneration: strconv.FormatInt(inst.Generation, 10),
		},
	}
	if cs.IDMap != nil {
		cs.UserNS = ""
	}
	if inst.SourceCommit != "" {
		cs.Labels[runtime.LabelSourceCommit] = inst.SourceCommit
	}
	if inst.Node != "" {
		cs.Labels[runtime.LabelNode] = inst.Node
	}
	if len(inst.ID) <= 63 {
		cs.Hostname = inst.ID
	}
	for _, e := range ct.Env {
		if e.ValueFrom != nil {
			continue // written to the instance's env directory
		}
		cs.Env = append(cs.Env, runtime.EnvVar{Name: e.Name, Value: e.Value})
	}
	if hasSecretEnv(ct) {
		if err := wrapSecretEnv(&cs, ct, inst, where); err != nil {
			return runtime.ContainerSpec{}, err
		}
	}
	if lim := ct.Resources.Limits.CPU; lim != "" {
		m, err := quadlet.ParseCPU(lim)
		if err != nil {
			return runtime.ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.container.resources.limits.cpu: %w", runtime.ErrInvalidSpec, where, err)
		}
		cs.CPUMillis = m
	}
	if lim := ct.Resources.Limits.Memory; lim != "" {
		b, err := quadlet.ParseMemory(lim)
		if err != nil {
			return runtime.ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.container.resources.limits.memory: %w", runtime.ErrInvalidSpec, where, err)
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
			cs.Ports = append(cs.Ports, runtime.PortMapping{HostIP: inst.PortHostIP, HostPort: host, ContainerPort: p.ContainerPort, Protocol: proto})
		}
	}
	vols, err := VolumePaths(q, inst)
	if err != nil {
		return runtime.ContainerSpec{}, err
	}
	for i, m := range ct.VolumeMounts {
		vp := findVolume(vols, m.Name)
		if vp == nil {
			return runtime.ContainerSpec{}, fmt.Errorf("%w: workload %s: spec.container.volumeMounts[%d].name: volume %q is not defined in spec.volumes",
				runtime.ErrInvalidSpec, where, i, m.Name)
		}
		src := vp.Path
		if m.SubPath != "" {
			sub, _ := cleanSubPath(m.SubPath) // checked by VolumePaths
			src = filepath.Join(src, sub)
		}
		cs.Mounts = append(cs.Mounts, runtime.Mount{Source: src, Target: m.MountPath, ReadOnly: m.ReadOnly || vp.Secret, Chown: vp.ClusterStorage && !m.ReadOnly})
	}
	if err := cs.Validate(); err != nil {
		return runtime.ContainerSpec{}, fmt.Errorf("workload %s: %w", where, err)
	}
	return cs, nil
}
