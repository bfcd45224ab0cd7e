package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"
)

// ContainerRuntime runs the containers of one node. Podman is
// the implementation; the agent loop depends only on this interface, so its
// tests can use a fake.
//
// Container arguments (id) accept a container ID, a unique ID prefix or a
// container name. Methods return errors that wrap ErrNotFound when the
// container or image does not exist, so callers test with errors.Is.
//
// The runtime never restarts a container by itself: containers are created
// with no restart policy and the agent decides every restart.
type ContainerRuntime interface {
	// PullImage pulls ref from its registry and returns the local image ID.
	PullImage(ctx context.Context, ref string, opts PullOptions) (imageID string, err error)
	// ImageExists reports whether ref is present in local storage.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// ImageConfig returns what a container of the local image ref runs
	// when it names no command.
	ImageConfig(ctx context.Context, ref string) (ImageConfig, error)
	// RemoveImage removes ref from local storage. It wraps ErrImageNotFound
	// when the image is absent and ErrInUse when a container still uses it.
	RemoveImage(ctx context.Context, ref string) error

	// CreateContainer creates (but does not start) a container and returns
	// its ID. An invalid spec wraps ErrInvalidSpec and creates nothing; a
	// taken name wraps ErrAlreadyExists.
	CreateContainer(ctx context.Context, spec ContainerSpec) (id string, err error)
	// RunContainer creates and starts a container in one step and returns
	// its ID; errors are CreateContainer's and StartContainer's. A
	// container that was created but could not start is left created, as
	// podman run leaves it, and its ID comes with the error.
	RunContainer(ctx context.Context, spec ContainerSpec) (id string, err error)
	// StartContainer starts a created or exited container. Starting a
	// running container is not an error.
	StartContainer(ctx context.Context, id string) error
	// StopContainer sends the stop signal, waits up to grace, then kills.
	// Stopping a stopped container is not an error.
	StopContainer(ctx context.Context, id string, grace time.Duration) error
	// RemoveContainer removes a container; force also removes a running
	// one (killing it at once) and makes removing an absent container a
	// success. Without force, an absent container wraps ErrNotFound. As
	// StopAndRemoveContainer, it leaves no process of the container.
	RemoveContainer(ctx context.Context, id string, force bool) error
	// StopAndRemoveContainer stops a container (the stop signal, then a
	// kill after grace) and removes it, in one step; an absent container is
	// a success. It returns nil only once no process of the container is
	// left; when the runtime removed the container but left processes of
	// it, they are killed and the error wraps ErrKilledLeftovers. Podman
	// 4.3 does so with a container whose stop was cut short
	// (ContainerStatus.Stopping): stop it first, for a graceful end.
	StopAndRemoveContainer(ctx context.Context, id string, grace time.Duration) error
	// InspectContainer returns the current status of one container.
	InspectContainer(ctx context.Context, id string) (*ContainerStatus, error)
	// ListManagedContainers returns every container carrying LabelManaged
	// and all of the given labels (nil: every managed container), running
	// or not.
	ListManagedContainers(ctx context.Context, labels map[string]string) ([]ContainerStatus, error)

	// Events streams container events of managed containers carrying all of
	// the given labels into out, until ctx is cancelled (it then returns
	// ctx.Err()) or the stream fails. It blocks: run it in a goroutine the
	// caller owns. It never closes out. Events may be lost or arrive late;
	// callers must also resync periodically with ListManagedContainers.
	Events(ctx context.Context, labels map[string]string, out chan<- Event) error
	// Logs returns the container's output (stdout and stderr interleaved).
	// With opts.Follow the reader stays open until the container stops, ctx
	// is cancelled or the reader is closed. The caller must Close it.
	Logs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error)
	// Exec runs cmd inside a running container and waits at most timeout
	// (0: no limit other than ctx). On timeout the command is killed and
	// the error wraps ErrExecTimeout. A command that ran and exited non-zero
	// is not an error: see ExecResult.ExitCode.
	Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (ExecResult, error)
}

// Label keys KAT puts on every container it creates.
const (
	// LabelManaged marks a container as created by KAT; its value is
	// "true".
	LabelManaged = "kat.managed"
	// LabelNamespace is the workload's namespace.
	LabelNamespace = "kat.namespace"
	// LabelWorkload is the workload's name.
	LabelWorkload = "kat.workload"
	// LabelInstance is the instance ID.
	LabelInstance = "kat.instance"
	// LabelSpecHash is the spec hash of the workload revision.
	LabelSpecHash = "kat.spec-hash"
	// LabelGeneration is the workload's generation, in decimal.
	LabelGeneration = "kat.generation"
	// LabelSourceCommit is the Git commit the spec came from, when any.
	LabelSourceCommit = "kat.source-commit"
	// LabelNode is the node the instance was assigned to.
	LabelNode = "kat.node"
	// LabelCluster is the UID of the cluster whose agent created the
	// container. An agent manages only containers carrying its cluster's
	// UID and its node's name: another cluster's containers on the same
	// host, and containers from before this label, are never its own.
	LabelCluster = "kat.cluster"
	// LabelStopGrace is the container's stop grace period in seconds
	// (workload.kat spec.container.stopGracePeriodSeconds), kept for when
	// its workload is gone.
	LabelStopGrace = "kat.stop-grace"
)

// Sentinel errors. Errors returned by the runtime wrap them; test with
// errors.Is.
var (
	// ErrNotFound means the container does not exist.
	ErrNotFound = errors.New("runtime: container not found")
	// ErrImageNotFound means the image is not in local storage (or, for
	// PullImage, not in the registry).
	ErrImageNotFound = errors.New("runtime: image not found")
	// ErrAlreadyExists means a container of that name already exists.
	ErrAlreadyExists = errors.New("runtime: container already exists")
	// ErrInUse means an image is still used by a container.
	ErrInUse = errors.New("runtime: image in use")
	// ErrNotRunning means the operation needs a running container.
	ErrNotRunning = errors.New("runtime: container not running")
	// ErrInvalidSpec means the request is invalid; retrying cannot help.
	ErrInvalidSpec = errors.New("runtime: invalid container spec")
	// ErrExecTimeout means an Exec outlived its timeout and was killed.
	ErrExecTimeout = errors.New("runtime: exec timed out")
	// ErrKilledLeftovers means the runtime removed a container but left
	// processes of it running, which were then killed: the container and
	// its processes are gone, but not as the runtime should have done it.
	ErrKilledLeftovers = errors.New("runtime: the container runtime left processes of a removed container running")
	// ErrDeviceUnavailable means a device the spec asks for
	// (ContainerSpec.Devices) cannot be attached: no CDI spec on the host
	// defines it. It wraps ErrInvalidSpec.
	ErrDeviceUnavailable = fmt.Errorf("%w: device unavailable", ErrInvalidSpec)
	// ErrHostPortInUse means a container could not start because a host
	// port it publishes is taken (by a process or another container).
	ErrHostPortInUse = errors.New("runtime: a host port the container publishes is in use")
)

// ContainerSpec is what CreateContainer needs. ToContainerSpec builds one
// from a workload.
type ContainerSpec struct {
	// Name is the container name, required: letters, digits, '_', '.' and
	// '-', starting with a letter or digit.
	Name string
	// Image is required: an image reference present in local storage
	// (CreateContainer never pulls).
	Image string
	// Command overrides the image's entrypoint. Default: the image's.
	Command []string
	// Args overrides the image's command (the entrypoint's arguments).
	// Default: the image's.
	Args []string
	// Env are environment variables, in order; names must be unique.
	// Default none.
	Env []EnvVar
	// Labels are set on the container. LabelManaged is always added.
	Labels map[string]string
	// Ports publish container ports on the host. Default none.
	Ports []PortMapping
	// Mounts are bind mounts. Sources must exist.
	// Default none.
	Mounts []Mount
	// CPUMillis limits CPU time, in thousandths of a core. Default 0: no
	// limit.
	CPUMillis int64
	// MemoryBytes limits memory. Default 0: no limit.
	MemoryBytes int64
	// UserNS is the user namespace mode passed to podman --userns ("auto",
	// "host", "keep-id", ...). Default "": the runtime's default, which for
	// Podman is PodmanConfig.DefaultUserNS ("auto").
	UserNS string
	// IDMap, when set, maps container uids and gids 0..IDMapSize-1 to
	// IDMap.HostBase.. on the host (podman --uidmap/--gidmap) instead of
	// UserNS. Every container of one workload gets the same map, so
	// replicas can share a volume the U mount option chowns. Default nil:
	// UserNS.
	IDMap *IDMap
	// Hostname sets the container's host name. Default: the runtime's.
	Hostname string
	// Sysctls are kernel settings of the container's own network namespace
	// (--sysctl), "net." keys only, for example
	// net.ipv4.ip_unprivileged_port_start=0 so that a proxy running as a
	// non-root user binds port 80. Default none.
	Sysctls map[string]string
	// StopTimeout is the grace period podman itself uses on stop. Default
	// 0: podman's default (10s).
	StopTimeout time.Duration
	// Network is the network the container joins (--network), for
	// example the node's (EnsureNetwork). Default "": podman's default
	// network.
	Network string
	// IP is the container's IPv4 address in Network (--ip); it requires
	// Network. Default invalid: podman picks one.
	IP netip.Addr
	// DNS are the container's nameservers (--dns), its resolv.conf's only
	// ones. Default none: podman's choice.
	DNS []netip.Addr
	// DNSSearch are the search domains of its resolv.conf (--dns-search),
	// in order. Default none: podman's.
	DNSSearch []string
	// DNSOptions are resolv.conf options (--dns-option), for example
	// "ndots:2". Default none.
	DNSOptions []string
	// Devices are fully qualified CDI device names (vendor/class=name, for
	// example "nvidia.com/gpu=0") the container gets (--device): what the
	// vendor's CDI spec in /etc/cdi or /var/run/cdi gives it, device nodes
	// and all. A device no spec defines fails the create with an error
	// wrapping ErrInvalidSpec that names it. Default none.
	Devices []string
	// LogMaxSize bounds the container's log file, in bytes: the log is
	// written by Podman's k8s-file driver (--log-driver k8s-file), whose
	// conmon starts the file afresh once it would pass the size
	// (--log-opt max-size), so it never holds more. A follower of the log
	// (Logs with Follow) goes on reading the new file. Default 0: Podman's
	// default driver, unbounded.
	LogMaxSize int64
}

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string
	Value string
}

// PortMapping publishes a container port on the host.
type PortMapping struct {
	// HostIP is the host address to bind. Default "": every address.
	HostIP string
	// HostPort is the host port, 1 to 65535. Default 0: the same as
	// ContainerPort.
	HostPort int
	// ContainerPort is required: 1 to 65535.
	ContainerPort int
	// Protocol is "tcp" (the default) or "udp"; case does not matter.
	Protocol string
}

// Mount is a bind mount of a host path into the container.
type Mount struct {
	// Source is the absolute host path, required.
	Source string
	// Target is the absolute path inside the container, required.
	Target string
	// ReadOnly mounts it read-only. Default false.
	ReadOnly bool
	// Chown makes podman chown the source, recursively, to the
	// container's root user (podman's U option), so container root can
	// write it under a user namespace. Default false.
	Chown bool
}

// State is the coarse state of a container.
type State string

// Container states. Podman's other states map to the nearest of these:
// "configured" and "initialized" to created, "stopped" and "stopping" to
// exited, "removing" to unknown.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateExited  State = "exited"
	StateUnknown State = "unknown"
)

// ContainerStatus is what the runtime observes about one container.
type ContainerStatus struct {
	// ID is the full container ID.
	ID string
	// Name is the container name.
	Name string
	// Image is the image reference the container was created from.
	Image string
	// ImageID is the ID of that image.
	ImageID string
	// Labels are the container's labels.
	Labels map[string]string
	// State is the coarse state; RawState is podman's own word for it.
	State    State
	RawState string
	// ExitCode is the last exit code; meaningful when State is
	// StateExited.
	ExitCode int
	// OOMKilled reports that the kernel killed the container for memory.
	OOMKilled bool
	// Pid is the host PID of the container's init process while it runs.
	Pid int
	// CreatedAt, StartedAt and FinishedAt are zero when unknown (never
	// started, never finished).
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	// RestartCount is podman's own restart count (0 for KAT's containers,
	// whose restarts the agent counts itself).
	RestartCount int
	// Ports are the published ports.
	Ports []PortMapping
}

// Stopping reports whether podman shows a stop of the container under way
// or cut short (its podman stop or rm was killed half way, which leaves the
// state so for good): its processes may still run. StopContainer stops such
// a container again; Podman 4.3's rm, even with --force, removes it without
// stopping it.
func (c *ContainerStatus) Stopping() bool { return strings.EqualFold(c.RawState, "stopping") }

// Event actions (Event.Action) the agent cares about. Podman reports more
// (attach, exec, mount, ...); they are passed through as podman names them.
const (
	ActionCreate = "create"
	ActionInit   = "init"
	ActionStart  = "start"
	ActionDied   = "died"
	ActionStop   = "stop"
	ActionKill   = "kill"
	ActionRemove = "remove"
	ActionPause  = "pause"
	ActionResume = "unpause"
	ActionOOM    = "oom"
	// ActionRestart is podman's own restart (podman restart), which the
	// agent never does.
	ActionRestart = "restart"
)

// Event is one container event.
type Event struct {
	// ID is the container ID and Name its name.
	ID   string
	Name string
	// Image is the image the container runs.
	Image string
	// Action is what happened, for example ActionStart or ActionDied.
	Action string
	// Labels are the container's labels (for podman: all event
	// attributes).
	Labels map[string]string
	// ExitCode is set for ActionDied.
	ExitCode int
	// Time is when it happened.
	Time time.Time
}

// PullOptions tunes PullImage.
type PullOptions struct {
	// Platform is os/arch[/variant]. Default "": the node's.
	Platform string
	// TLSVerify, when set to false, allows a plain HTTP or self-signed
	// registry. Default nil: podman's default (verify).
	TLSVerify *bool
	// AuthFile is a registry auth file in containers-auth.json format.
	// Default "": podman's default.
	AuthFile string
	// Progress receives podman's progress lines. Default nil: none.
	Progress io.Writer
}

// LogOptions tunes Logs.
type LogOptions struct {
	// Follow keeps the stream open for new output.
	Follow bool
	// Tail returns only the last Tail lines. Default 0: all lines (a
	// negative value also means all).
	Tail int
	// Since returns only output after this time. Default zero: all.
	Since time.Time
	// Timestamps prefixes each line with its time.
	Timestamps bool
}

// ExecResult is the outcome of a command run by Exec.
type ExecResult struct {
	// ExitCode is the command's exit status.
	ExitCode int
	// Output is stdout and stderr interleaved, capped at MaxExecOutput
	// bytes (the rest is dropped and Truncated set).
	Output    []byte
	Truncated bool
}

// MaxExecOutput caps ExecResult.Output.
const MaxExecOutput = 64 << 10
