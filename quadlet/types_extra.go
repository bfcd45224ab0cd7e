package quadlet

// VirtualLoadBalancer is the optional network file of a Service
// (conventionally VirtualLoadBalancer.kat): the ports to balance, a health
// check and ingress hints.
type VirtualLoadBalancer struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindVirtualLoadBalancer.
	Kind string `json:"kind" yaml:"kind"`
	// Spec is required.
	Spec VirtualLoadBalancerSpec `json:"spec" yaml:"spec"`
}

// VirtualLoadBalancerSpec is the content of a VirtualLoadBalancer.
type VirtualLoadBalancerSpec struct {
	// Ports is required and not empty: the ports the container serves.
	Ports []Port `json:"ports" yaml:"ports"`
	// HealthCheck decides readiness. Default nil: a running container is
	// healthy.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty" yaml:"healthCheck,omitempty"`
	// Ingress are hints for an external ingress controller. Default none.
	Ingress []Ingress `json:"ingress,omitempty" yaml:"ingress,omitempty"`
}

// Port is a port the container listens on.
type Port struct {
	// Name is an optional DNS label, unique among the ports, that ingress
	// rules can refer to. Default none.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// ContainerPort is required: 1 to 65535. Together with Protocol it is
	// unique among the ports.
	ContainerPort int `json:"containerPort" yaml:"containerPort"`
	// Protocol is "TCP" (the default) or "UDP".
	Protocol string `json:"protocol" yaml:"protocol"`
}

// HealthCheck runs a command in the container to decide whether it is
// healthy.
type HealthCheck struct {
	// Exec is required: the command to run.
	Exec ExecAction `json:"exec" yaml:"exec"`
	// InitialDelaySeconds is the wait before the first check (>= 0).
	// Default 0.
	InitialDelaySeconds int `json:"initialDelaySeconds" yaml:"initialDelaySeconds"`
	// PeriodSeconds is the interval between checks (>= 1). Default 10.
	PeriodSeconds int `json:"periodSeconds" yaml:"periodSeconds"`
	// TimeoutSeconds bounds one check (>= 1). Default 1.
	TimeoutSeconds int `json:"timeoutSeconds" yaml:"timeoutSeconds"`
	// SuccessThreshold is the number of consecutive successes that make an
	// instance healthy (>= 1). Default 1.
	SuccessThreshold int `json:"successThreshold" yaml:"successThreshold"`
	// FailureThreshold is the number of consecutive failures that make an
	// instance unhealthy (>= 1). Default 3.
	FailureThreshold int `json:"failureThreshold" yaml:"failureThreshold"`
}

// ExecAction is a command run inside the container; exit status 0 means
// healthy.
type ExecAction struct {
	// Command is required and not empty.
	Command []string `json:"command" yaml:"command"`
}

// Ingress is a hint for an external ingress controller.
type Ingress struct {
	// Host is required: the external host name, optionally starting with
	// "*." for a wildcard.
	Host string `json:"host" yaml:"host"`
	// Path is a path prefix starting with "/". Default "/".
	Path string `json:"path" yaml:"path"`
	// ServicePortName names a port of Spec.Ports. One of ServicePortName
	// and ServicePort is required.
	ServicePortName string `json:"servicePortName,omitempty" yaml:"servicePortName,omitempty"`
	// ServicePort is a containerPort of Spec.Ports; it overrides
	// ServicePortName. Default none.
	ServicePort int `json:"servicePort,omitempty" yaml:"servicePort,omitempty"`
	// TLS asks the ingress controller to manage a certificate. Default
	// false.
	TLS bool `json:"tls,omitempty" yaml:"tls,omitempty"`
}

// JobDefinition is the job file of a workload of type Job
// (conventionally job.kat).
type JobDefinition struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindJobDefinition.
	Kind string `json:"kind" yaml:"kind"`
	// Spec may be left out to take every default.
	Spec JobSpec `json:"spec" yaml:"spec"`
}

// JobSpec says when and how often a job runs.
type JobSpec struct {
	// Schedule is a cron schedule: five fields or a descriptor such as
	// "@hourly", optionally prefixed with "CRON_TZ=Area/City ". Times without
	// CRON_TZ are in the leader's local time zone. Default none: the job runs
	// once.
	Schedule string `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	// Completions is the number of instances of a run that must exit 0 (1
	// to MaxJobInstances). Default 1.
	Completions int `json:"completions" yaml:"completions"`
	// Parallelism is the most instances running at once (1 to
	// MaxJobInstances). Default 1.
	Parallelism int `json:"parallelism" yaml:"parallelism"`
	// ActiveDeadlineSeconds bounds one run of the job (> 0). Default none.
	ActiveDeadlineSeconds int `json:"activeDeadlineSeconds,omitempty" yaml:"activeDeadlineSeconds,omitempty"`
	// BackoffLimit is the number of failed instances a run retries with a
	// new instance (0 to MaxJobInstances): a run makes at most Completions
	// + BackoffLimit instances and fails at failure BackoffLimit + 1.
	// Default 3.
	BackoffLimit int `json:"backoffLimit" yaml:"backoffLimit"`
	// ConcurrencyPolicy says what a scheduled firing does while an earlier
	// run is still active: ConcurrencyAllow starts another run,
	// ConcurrencyForbid skips the firing, ConcurrencyReplace stops the
	// active runs and starts a new one. Default ConcurrencyForbid, left out
	// of the canonical form.
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty" yaml:"concurrencyPolicy,omitempty"`
	// SuccessfulJobsHistoryLimit is how many succeeded runs are kept, with
	// their finished containers (>= 0). Default 3
	// (DefaultSuccessfulJobsHistoryLimit), left out of the canonical form.
	SuccessfulJobsHistoryLimit *int `json:"successfulJobsHistoryLimit,omitempty" yaml:"successfulJobsHistoryLimit,omitempty"`
	// FailedJobsHistoryLimit is how many failed runs are kept, with their
	// finished containers (>= 0). Default 1 (DefaultFailedJobsHistoryLimit),
	// left out of the canonical form.
	FailedJobsHistoryLimit *int `json:"failedJobsHistoryLimit,omitempty" yaml:"failedJobsHistoryLimit,omitempty"`
}

// Concurrency policies of a scheduled Job (JobSpec.ConcurrencyPolicy).
const (
	ConcurrencyAllow   = "Allow"
	ConcurrencyForbid  = "Forbid"
	ConcurrencyReplace = "Replace"
)

// Defaults of JobSpec's history limits.
const (
	DefaultSuccessfulJobsHistoryLimit = 3
	DefaultFailedJobsHistoryLimit     = 1
)

// Concurrency is the job's concurrency policy, its default applied.
func (s JobSpec) Concurrency() string {
	if s.ConcurrencyPolicy == "" {
		return ConcurrencyForbid
	}
	return s.ConcurrencyPolicy
}

// SuccessfulHistory is SuccessfulJobsHistoryLimit, its default applied.
func (s JobSpec) SuccessfulHistory() int {
	if s.SuccessfulJobsHistoryLimit == nil {
		return DefaultSuccessfulJobsHistoryLimit
	}
	return *s.SuccessfulJobsHistoryLimit
}

// FailedHistory is FailedJobsHistoryLimit, its default applied.
func (s JobSpec) FailedHistory() int {
	if s.FailedJobsHistoryLimit == nil {
		return DefaultFailedJobsHistoryLimit
	}
	return *s.FailedJobsHistoryLimit
}

// BuildDefinition is the build file of a workload built from Git
// (conventionally build.kat).
type BuildDefinition struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindBuildDefinition.
	Kind string `json:"kind" yaml:"kind"`
	// Spec may be left out to take every default.
	Spec BuildSpec `json:"spec" yaml:"spec"`
}

// BuildSpec says how to build the image.
type BuildSpec struct {
	// BuildContext is the build context, relative to the repository root
	// and inside it. Default ".".
	BuildContext string `json:"buildContext" yaml:"buildContext"`
	// DockerfilePath is the Dockerfile, relative to BuildContext and inside
	// the repository. Default "./Dockerfile".
	DockerfilePath string `json:"dockerfilePath" yaml:"dockerfilePath"`
	// BuildArgs are passed as --build-arg; keys must be non-empty and
	// contain no '=' or spaces. Default none.
	BuildArgs map[string]string `json:"buildArgs,omitempty" yaml:"buildArgs,omitempty"`
	// TargetStage is the stage of a multi-stage build. Default: the last.
	TargetStage string `json:"targetStage,omitempty" yaml:"targetStage,omitempty"`
	// Platform is os/arch[/variant], for example "linux/arm64". Default:
	// the node's.
	Platform string `json:"platform,omitempty" yaml:"platform,omitempty"`
	// Cache is the registry build cache. Default nil: no cache.
	Cache *BuildCache `json:"cache,omitempty" yaml:"cache,omitempty"`
}

// BuildCache is the registry used as a build cache.
type BuildCache struct {
	// RegistryPath is the image repository cache images are pushed to and
	// pulled from, tagged with the commit. Default none.
	RegistryPath string `json:"registryPath,omitempty" yaml:"registryPath,omitempty"`
}

// Namespace is the content of namespace.kat.
type Namespace struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindNamespace.
	Kind string `json:"kind" yaml:"kind"`
	// Metadata.Name is required; Metadata.Namespace must be empty.
	Metadata ObjectMeta `json:"metadata" yaml:"metadata"`
}
