package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// Runtime is the part of runtime.ContainerRuntime the agent loop uses.
type Runtime interface {
	ImageExists(ctx context.Context, ref string) (bool, error)
	ImageConfig(ctx context.Context, ref string) (runtime.ImageConfig, error)
	PullImage(ctx context.Context, ref string, opts runtime.PullOptions) (string, error)
	RunContainer(ctx context.Context, spec runtime.ContainerSpec) (string, error)
	StartContainer(ctx context.Context, id string) error
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	StopAndRemoveContainer(ctx context.Context, id string, grace time.Duration) error
	InspectContainer(ctx context.Context, id string) (*runtime.ContainerStatus, error)
	ListManagedContainers(ctx context.Context, labels map[string]string) ([]runtime.ContainerStatus, error)
	Events(ctx context.Context, labels map[string]string, out chan<- runtime.Event) error
	Logs(ctx context.Context, id string, opts runtime.LogOptions) (io.ReadCloser, error)
	Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (runtime.ExecResult, error)
}

var _ Runtime = runtime.ContainerRuntime(nil)

// DefaultMaxConcurrentSteps returns AgentConfig.MaxConcurrentSteps' default: one
// container operation per CPU, at least 2 and at most 4. A podman run is
// CPU-bound and serialised by Podman's locks in part: measured on a 2-core
// host (bench:agent, 50 runs), two at once start containers 10% faster than
// one after another, while four at once cost each run 0.6 s of CPU against
// 0.35 s and end slower. Podman 4.3 runs them safely at once because each
// container has an explicit uid map (NewSpecBuilder never asks for
// --userns=auto).
func DefaultMaxConcurrentSteps() int { return min(max(goruntime.NumCPU(), 2), 4) }

// SpecBuilder turns an assignment and its parsed Quadlet into the container
// to create, preparing what must exist on the host first (volume
// directories), with what the agent found on the node (SpecInputs). An
// error wrapping runtime.ErrInvalidSpec fails the instance.
type SpecBuilder func(a api.Assignment, q *quadlet.Quadlet, in SpecInputs) (runtime.ContainerSpec, error)

// SpecInputs are what the agent finds on the node for a container.
type SpecInputs struct {
	// HostPorts maps each container port of the VirtualLoadBalancer to the
	// host port the agent picked for it.
	HostPorts map[int]int
	// Image is what the instance's image runs, read when the container
	// starts through the wrapper of secret environment variables and
	// spec.container.command is not given; nil otherwise.
	Image *runtime.ImageConfig
}

// AgentConfig holds the dependencies of an Agent.
type AgentConfig struct {
	// Repo is the cluster state: the agent watches its assignments there and
	// reads the restart counts it reported before it restarted. Required.
	Repo *resources.Repo
	// Node is this node's name. Required.
	Node string
	// ClusterUID is the UID of this node's cluster. Required. Every
	// container the agent creates carries it (runtime.LabelCluster), and the
	// agent manages only containers carrying it and Node: another
	// cluster's containers on the same host, and containers without it
	// (made before the label, or by hand), are never adopted, stopped or
	// removed.
	ClusterUID string
	// Runtime runs the containers. Required.
	Runtime Runtime
	// Facts records the agent's events (a failed build): the node's one
	// road for its facts. Default resources.NewNodeFacts(Repo, nil), a
	// member's road; a worker, whose etcd user may not write, sends them
	// to the leader (LeaderLink).
	Facts Facts
	// BuildSpec builds each container's spec. Required.
	BuildSpec SpecBuilder
	// Resync is how often the agent re-lists the containers
	// without any event. Default 10s.
	Resync time.Duration
	// Tick is how often timers (restart back-off, health checks) are
	// looked at. Default 500ms.
	Tick time.Duration
	// RestartBackoff is the delay before the first restart of a quick
	// exit; it doubles per quick exit up to 5 minutes. Default 1s.
	RestartBackoff time.Duration
	// MaxConcurrentPulls bounds image pulls in flight. Default 2.
	MaxConcurrentPulls int
	// MaxConcurrentSteps bounds the container steps in flight (run, start)
	// and, apart from them, the removals and the health checks. Default
	// DefaultMaxConcurrentSteps().
	MaxConcurrentSteps int
	// HostPorts is where a container port is published on the host when
	// the port itself is taken. Default runtime.DefaultHostPorts.
	HostPorts runtime.PortRange
	// StopGrace is how long a removed container gets to stop before it is
	// killed when its workload sets no spec.container.stopGracePeriodSeconds.
	// Default 10s, as Podman's.
	StopGrace time.Duration
	// Builder builds the images of assignments that carry a build
	// reference (workloads built from an app repository). Default nil: such
	// instances fail with a message saying the node cannot build.
	Builder Builder
	// BuildAuth holds the credential files for cloning app repositories.
	// Default: none (anonymous).
	BuildAuth api.GitAuth
	// CheckHost finds what the container runtime needs that is missing on
	// this host (runtime.Podman.CheckHost). The agent runs it at start, on
	// every resync while it fails, and after a step failed for that
	// reason; while it fails, the node reports RuntimeReady=False with its
	// message. Default none.
	CheckHost func(ctx context.Context) error
	// Networks makes the node's Podman network for the instances with an
	// overlay address (api.Assignment.IP), from the node's record
	// under /kat/network/nodes/. Default nil: such instances wait with
	// ErrNetworkNotReady; instances without an address run on Podman's
	// default network either way.
	Networks Networks
	// NetworkName is the node's Podman network. Default
	// DefaultNetworkName.
	NetworkName string
	// ClusterDomain is cluster.kat's clusterDomain: an instance's DNS
	// search path is {namespace}.{ClusterDomain}, then ClusterDomain.
	// Default quadlet.DefaultClusterDomain.
	ClusterDomain string
	// LogMaxSize bounds each container's log, in bytes
	// (runtime.ContainerSpec.LogMaxSize; cluster.kat's
	// containerLogMaxSize). Default 0: unbounded.
	LogMaxSize int64
	// IngressDir is where the agent keeps the run directory of the node's
	// ingress proxy instance (DATA_DIR/ingress). Default "": the node runs
	// no ingress proxy (an instance of one fails).
	IngressDir string
	// OnChange is called, without blocking, whenever the instance reports
	// change, so the heartbeat can send them at once. Default none.
	OnChange func()
	// Now replaces time.Now, for tests.
	Now func() time.Time
	// Leave reports whether the agent leaves the container of an
	// instance alone as if it were not its own: never adopted, stopped,
	// restarted, removed or reported. A detached node's control plane
	// leaves the cluster's Job instances to run to their end
	// (docs/detached.md). Default nil: none.
	Leave  func(instanceID string) bool
	Logger zerolog.Logger
	// Secrets fetches the secrets the node's instances use, and SecretsDir
	// is where they are kept (a tmpfs SecretsMount mounts, the directory
	// of NewSpecBuilderWithSecrets). Default nil: an instance using a
	// secret is not created.
	Secrets      SecretSource
	SecretsDir   string
	SecretsMount func(dir string) error
	// IngressCertificates fetches the certificates the node's ingress
	// proxy serves. Default nil: the proxy serves none.
	IngressCertificates IngressCertificateSource
}

// withDefaults checks cfg and fills in its defaults.
func (cfg AgentConfig) withDefaults() (AgentConfig, error) {
	if cfg.Repo == nil || cfg.Node == "" || cfg.Runtime == nil || cfg.BuildSpec == nil {
		return cfg, errors.New("agent: repo, node, runtime and spec builder are required")
	}
	if cfg.ClusterUID == "" {
		return cfg, errors.New("agent: cluster UID is required: without it the agent could not tell its containers from another cluster's")
	}
	if cfg.Facts == nil {
		cfg.Facts = resources.NewNodeFacts(cfg.Repo, nil)
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 10 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 500 * time.Millisecond
	}
	if cfg.MaxConcurrentPulls <= 0 {
		cfg.MaxConcurrentPulls = 2
	}
	if cfg.MaxConcurrentSteps <= 0 {
		cfg.MaxConcurrentSteps = DefaultMaxConcurrentSteps()
	}
	if cfg.HostPorts == (runtime.PortRange{}) {
		cfg.HostPorts = runtime.DefaultHostPorts
	}
	if err := cfg.HostPorts.Validate(); err != nil {
		return cfg, fmt.Errorf("agent: host ports: %w", err)
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = quadlet.DefaultStopGracePeriodSeconds * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnChange == nil {
		cfg.OnChange = func() {}
	}
	if cfg.NetworkName == "" {
		cfg.NetworkName = DefaultNetworkName
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = quadlet.DefaultClusterDomain
	}
	return cfg, nil
}
