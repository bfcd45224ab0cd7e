package quadlet

// APIVersion is the only apiVersion this package accepts.
const APIVersion = "kat.dws.rip/v1alpha1"

// Kinds of Quadlet documents.
const (
	KindWorkload             = "Workload"
	KindVirtualLoadBalancer  = "VirtualLoadBalancer"
	KindJobDefinition        = "JobDefinition"
	KindBuildDefinition      = "BuildDefinition"
	KindNamespace            = "Namespace"
	KindClusterConfiguration = "ClusterConfiguration"
)

// Well-known file names.
const (
	// WorkloadFile is the file of a workload directory that holds the
	// Workload.
	WorkloadFile = "workload.kat"
	// NamespaceFile is the conventional name of a Namespace file.
	NamespaceFile = "namespace.kat"
)

// DefaultNamespace is the namespace of a workload that names none.
const DefaultNamespace = "default"

// Workload types (WorkloadSpec.Type).
const (
	TypeService       = "Service"
	TypeJob           = "Job"
	TypeDaemonService = "DaemonService"
)

// Update strategy types (UpdateStrategy.Type).
const (
	UpdateRolling      = "Rolling"
	UpdateSimultaneous = "Simultaneous"
)

// Restart conditions (RestartPolicy.Condition).
const (
	RestartNever    = "Never"
	RestartMaxCount = "MaxCount"
	RestartAlways   = "Always"
)

// ObjectMeta names a resource.
type ObjectMeta struct {
	// Name is required: a DNS label (lowercase letters, digits and '-', at
	// most 63 characters).
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Namespace is the namespace of a Workload, a DNS label. It defaults to
	// ParseOptions.DefaultNamespace, itself defaulting to "default". It must
	// be empty for a Namespace and a ClusterConfiguration.
	Namespace string `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	// Labels are free-form key/value pairs; keys must not be empty. Default
	// none.
	Labels map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
}

// Workload is the content of workload.kat: what to run, how many,
// and how to restart and update it.
type Workload struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindWorkload.
	Kind string `json:"kind" yaml:"kind"`
	// Metadata is required: the name, namespace and labels.
	Metadata ObjectMeta `json:"metadata" yaml:"metadata"`
	// Spec is required: the desired state.
	Spec WorkloadSpec `json:"spec" yaml:"spec"`
}

// WorkloadSpec is the desired state of a workload.
type WorkloadSpec struct {
	// Type is required: TypeService, TypeJob or TypeDaemonService.
	Type string `json:"type" yaml:"type"`
	// Source is required: where the image comes from.
	Source Source `json:"source" yaml:"source"`
	// Replicas is the desired instance count, required (>= 0) for a
	// Service and ignored otherwise. Nil when absent.
	Replicas *int `json:"replicas,omitempty" yaml:"replicas,omitempty"`
	// UpdateStrategy says how a changed spec is rolled out. For a Service
	// or DaemonService it defaults to Rolling with maxSurge 1; for a Job it
	// stays nil unless given.
	UpdateStrategy *UpdateStrategy `json:"updateStrategy,omitempty" yaml:"updateStrategy,omitempty"`
	// RestartPolicy is required: when the agent restarts a container.
	RestartPolicy RestartPolicy `json:"restartPolicy" yaml:"restartPolicy"`
	// NodeSelector limits scheduling to nodes with all of these labels.
	// Default none (any node).
	NodeSelector map[string]string `json:"nodeSelector,omitempty" yaml:"nodeSelector,omitempty"`
	// Tolerations are the node taints this workload tolerates. Default
	// none.
	Tolerations []Toleration `json:"tolerations,omitempty" yaml:"tolerations,omitempty"`
	// Container is required: the one container of each instance.
	Container Container `json:"container" yaml:"container"`
	// Volumes are the volumes Container.VolumeMounts may refer to. Default
	// none.
	Volumes []Volume `json:"volumes,omitempty" yaml:"volumes,omitempty"`
}

// Source says where a workload's image comes from: exactly one of Image and
// Git is set.
type Source struct {
	// Image is a container image reference to pull.
	Image string `json:"image,omitempty" yaml:"image,omitempty"`
	// Git is a repository to build the image from; a BuildDefinition is
	// then required.
	Git *GitSource `json:"git,omitempty" yaml:"git,omitempty"`
	// CacheImage is a registry path for build cache layers, allowed only
	// with Git. Default none.
	CacheImage string `json:"cacheImage,omitempty" yaml:"cacheImage,omitempty"`
}

// GitSource is an application repository to build from. Commit overrides Tag,
// which overrides Branch.
type GitSource struct {
	// Repository is required: an https://, http://, ssh:// or file:// URL,
	// or an scp-like address such as git@host:owner/repo.git.
	Repository string `json:"repository" yaml:"repository"`
	// Branch defaults to the repository's default branch.
	Branch string `json:"branch,omitempty" yaml:"branch,omitempty"`
	// Tag overrides Branch. Default none.
	Tag string `json:"tag,omitempty" yaml:"tag,omitempty"`
	// Commit is a commit hash (4 to 64 hex digits) that overrides Tag and
	// Branch. Default none.
	Commit string `json:"commit,omitempty" yaml:"commit,omitempty"`
}

// UpdateStrategy says how a changed spec replaces running instances.
type UpdateStrategy struct {
	// Type is UpdateRolling (the default) or UpdateSimultaneous.
	Type string `json:"type" yaml:"type"`
	// Rolling tunes a rolling update. For type Rolling it defaults to
	// maxSurge 1.
	Rolling *RollingUpdate `json:"rolling,omitempty" yaml:"rolling,omitempty"`
	// Verify is a command a DaemonService's rolling update runs inside the
	// new instance on each node once it is healthy: the next node starts
	// only after it exits 0, and a failure rolls the update back. Only for
	// a DaemonService updated Rolling. Default none: healthy is enough.
	Verify *VerifyCommand `json:"verify,omitempty" yaml:"verify,omitempty"`
	// ProgressDeadlineSeconds is how long a rollout may go without progress
	// (one more new instance ready, or one fewer old instance) before it
	// stops and is marked failed, from 1 to 86400. Default 600
	// (DefaultProgressDeadlineSeconds); nil when not written.
	ProgressDeadlineSeconds *int `json:"progressDeadlineSeconds,omitempty" yaml:"progressDeadlineSeconds,omitempty"`
	// AutoRollback makes a failed rollout apply the files of the last
	// generation that rolled out successfully again, as a new generation.
	// Default true; nil when not written.
	AutoRollback *bool `json:"autoRollback,omitempty" yaml:"autoRollback,omitempty"`
}

// DefaultProgressDeadlineSeconds is the progress deadline of a rollout whose
// workload sets none.
const DefaultProgressDeadlineSeconds = 600

// ProgressDeadline is the progress deadline in seconds, its default applied;
// u may be nil.
func (u *UpdateStrategy) ProgressDeadline() int {
	if u == nil || u.ProgressDeadlineSeconds == nil {
		return DefaultProgressDeadlineSeconds
	}
	return *u.ProgressDeadlineSeconds
}

// AutoRollbackEnabled reports whether a failed rollout is rolled back, its
// default (true) applied; u may be nil.
func (u *UpdateStrategy) AutoRollbackEnabled() bool {
	return u == nil || u.AutoRollback == nil || *u.AutoRollback
}

// IsSimultaneous reports whether the strategy stops every old instance
// before it starts new ones; u may be nil (Rolling).
func (u *UpdateStrategy) IsSimultaneous() bool { return u != nil && u.Type == UpdateSimultaneous }

// Surge is the absolute maxSurge for replicas instances: the default 1 when
// u or its rolling part is nil.
func (u *UpdateStrategy) Surge(replicas int) int {
	if u == nil || u.Rolling == nil {
		return defaultMaxSurge
	}
	return u.Rolling.MaxSurge.Value(replicas)
}

// VerifyCommand is the check of a new instance during a DaemonService's
// node-by-node update (UpdateStrategy.Verify).
type VerifyCommand struct {
	// Command is required and not empty: run inside the container, exit
	// status 0 means verified.
	Command []string `json:"command" yaml:"command"`
	// TimeoutSeconds bounds the command (>= 1); a command still running
	// then is killed and counts as failed. Default 30.
	TimeoutSeconds int `json:"timeoutSeconds" yaml:"timeoutSeconds"`
}

// DefaultMaxParallel is how many nodes a DaemonService's rolling update
// updates at once when RollingUpdate.MaxParallel is not given.
const DefaultMaxParallel = 1

// RollingUpdate tunes a rolling update.
type RollingUpdate struct {
	// MaxSurge is how many instances may run above the replica count during
	// an update: a number (>= 0) or a percentage of replicas ("25%",
	// rounded up). Default 1.
	MaxSurge IntOrPercent `json:"maxSurge" yaml:"maxSurge"`
	// MaxParallel is how many nodes a DaemonService's update works on at
	// once (>= 1); only for a DaemonService. Default DefaultMaxParallel,
	// kept as 0 so that writing the default changes no spec hash.
	MaxParallel int `json:"maxParallel,omitempty" yaml:"maxParallel,omitempty"`
}

// NodesAtOnce is MaxParallel with its default filled in.
func (r *RollingUpdate) NodesAtOnce() int {
	if r == nil || r.MaxParallel <= 0 {
		return DefaultMaxParallel
	}
	return r.MaxParallel
}

// RestartPolicy says when the agent restarts an exited container.
type RestartPolicy struct {
	// Condition is required: RestartNever, RestartMaxCount or
	// RestartAlways.
	Condition string `json:"condition" yaml:"condition"`
	// MaxRestarts is the number of restarts allowed within ResetSeconds
	// (> 0). Defaults to 5 for MaxCount, otherwise unused.
	MaxRestarts int `json:"maxRestarts,omitempty" yaml:"maxRestarts,omitempty"`
	// ResetSeconds is the window after which the restart count resets
	// (> 0). Defaults to 3600 for MaxCount, otherwise unused.
	ResetSeconds int `json:"resetSeconds,omitempty" yaml:"resetSeconds,omitempty"`
}

// Toleration lets a workload run on nodes with a matching taint.
type Toleration struct {
	// Key is the taint key. Empty with operator Exists matches every taint.
	Key string `json:"key,omitempty" yaml:"key,omitempty"`
	// Operator is "Exists" (the default: any value) or "Equal" (Value must
	// match).
	Operator string `json:"operator" yaml:"operator"`
	// Value is required with operator Equal and not allowed with Exists.
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
	// Effect is "NoSchedule" or "PreferNoSchedule"; empty (the default)
	// matches every effect.
	Effect string `json:"effect,omitempty" yaml:"effect,omitempty"`
}

// Container describes the one container of each instance.
type Container struct {
	// Name is an informational DNS label. Default none.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// Command overrides the image's entrypoint. Default: the image's.
	Command []string `json:"command,omitempty" yaml:"command,omitempty"`
	// Args overrides the image's arguments. Default: the image's.
	Args []string `json:"args,omitempty" yaml:"args,omitempty"`
	// Env sets environment variables; names must be unique. Default none.
	Env []EnvVar `json:"env,omitempty" yaml:"env,omitempty"`
	// VolumeMounts mount volumes from WorkloadSpec.Volumes. Default none.
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty" yaml:"volumeMounts,omitempty"`
	// Resources are requests and limits. Default none (no limits, nothing
	// requested).
	Resources Resources `json:"resources,omitzero" yaml:"resources,omitempty"`
	// StopGracePeriodSeconds is how long the container gets between the
	// stop signal (SIGTERM) and SIGKILL when KAT stops it, from 0 to 3600.
	// Default 10, as Podman's (DefaultStopGracePeriodSeconds).
	StopGracePeriodSeconds *int `json:"stopGracePeriodSeconds,omitempty" yaml:"stopGracePeriodSeconds,omitempty"`
}

// DefaultStopGracePeriodSeconds is the stop grace of a container whose
// workload sets none.
const DefaultStopGracePeriodSeconds = 10

// StopGrace is the container's stop grace period in seconds, its default
// applied.
func (c Container) StopGrace() int {
	if c.StopGracePeriodSeconds == nil {
		return DefaultStopGracePeriodSeconds
	}
	return *c.StopGracePeriodSeconds
}

// EnvVar is one environment variable.
type EnvVar struct {
	// Name is required: letters, digits and '_', not starting with a
	// digit.
	Name string `json:"name" yaml:"name"`
	// Value is taken exactly as written. Default "".
	Value string `json:"value,omitempty" yaml:"value,omitempty"`
	// ValueFrom takes the value from elsewhere instead; not with Value.
	// Default none.
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty" yaml:"valueFrom,omitempty"`
}

// EnvVarSource says where a variable's value comes from.
type EnvVarSource struct {
	// SecretKeyRef is required: a key of a Secret of the workload's
	// namespace.
	SecretKeyRef *SecretKeyRef `json:"secretKeyRef,omitempty" yaml:"secretKeyRef,omitempty"`
}

// SecretKeyRef names one key of a Secret.
type SecretKeyRef struct {
	// Name is required: the Secret's name, in the workload's namespace.
	Name string `json:"name" yaml:"name"`
	// Key is required: one of the Secret's keys.
	Key string `json:"key" yaml:"key"`
}

// VolumeMount mounts a volume into the container.
type VolumeMount struct {
	// Name is required: the name of a volume in WorkloadSpec.Volumes.
	Name string `json:"name" yaml:"name"`
	// MountPath is required: an absolute path inside the container, unique
	// among the mounts.
	MountPath string `json:"mountPath" yaml:"mountPath"`
	// SubPath mounts a relative path inside the volume instead of its root.
	// Default none.
	SubPath string `json:"subPath,omitempty" yaml:"subPath,omitempty"`
	// ReadOnly mounts the volume read-only. Default false.
	ReadOnly bool `json:"readOnly,omitempty" yaml:"readOnly,omitempty"`
}

// Resources are the resource requests and limits of the container.
type Resources struct {
	// Requests are used for scheduling. Each unset request defaults to the
	// matching limit.
	Requests ResourceList `json:"requests,omitzero" yaml:"requests,omitempty"`
	// Limits are enforced by the runtime. Default none.
	Limits ResourceList `json:"limits,omitzero" yaml:"limits,omitempty"`
	// GPU asks for a node with a GPU. Default nil (no GPU).
	GPU *GPU `json:"gpu,omitempty" yaml:"gpu,omitempty"`
}

// ResourceList is an amount of CPU and memory. See ParseCPU and ParseMemory
// for the accepted forms.
type ResourceList struct {
	// CPU is in cores ("0.5", "2") or millicores ("100m"). Default none.
	CPU string `json:"cpu,omitempty" yaml:"cpu,omitempty"`
	// Memory is in bytes with an optional suffix ("64Mi", "1G"). Default
	// none.
	Memory string `json:"memory,omitempty" yaml:"memory,omitempty"`
}

// GPU asks for a node with a GPU.
type GPU struct {
	// Driver is "any" (the default), "nvidia" or "amd".
	Driver string `json:"driver" yaml:"driver"`
	// MinVRAMMB is the minimum GPU memory in MiB (>= 0). Default 0.
	MinVRAMMB int `json:"minVRAM_MB,omitempty" yaml:"minVRAM_MB,omitempty"`
}

// Volume is storage the container can mount. Exactly one of
// SimpleClusterStorage, HostMount and Secret is set.
type Volume struct {
	// Name is required: a DNS label, unique among the volumes.
	Name string `json:"name" yaml:"name"`
	// SimpleClusterStorage is a directory under the agent's volumeBasePath.
	// Write it as "simpleClusterStorage: {}".
	SimpleClusterStorage *SimpleClusterStorage `json:"simpleClusterStorage,omitempty" yaml:"simpleClusterStorage,omitempty"`
	// HostMount is a path on the node.
	HostMount *HostMount `json:"hostMount,omitempty" yaml:"hostMount,omitempty"`
	// Secret mounts a Secret's keys as files, read-only, from memory.
	Secret *SecretVolume `json:"secret,omitempty" yaml:"secret,omitempty"`
}

// SecretVolume is a Secret mounted as a directory: one file per key, updated
// in place when the Secret changes.
type SecretVolume struct {
	// SecretName is required: a Secret of the workload's namespace.
	SecretName string `json:"secretName" yaml:"secretName"`
}

// SimpleClusterStorage has no settings.
type SimpleClusterStorage struct{}

// HostMount mounts a path of the node.
type HostMount struct {
	// HostPath is required: an absolute, clean path on the node.
	HostPath string `json:"hostPath" yaml:"hostPath"`
	// EnsureType checks or creates the path before mounting:
	// DirectoryOrCreate, Directory, FileOrCreate, File or Socket. Empty (the
	// default) performs no check.
	EnsureType string `json:"ensureType,omitempty" yaml:"ensureType,omitempty"`
}
