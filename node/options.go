package node

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/detach/rejoin"
	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// Options are what `kat-agent init` is told on its command line. Errors name
// the flag each field comes from. Empty strings and zero ports mean "not
// given": the saved node state or cluster.kat applies. Agent starts from
// DefaultAgentOptions.
type Options struct {
	// ConfigPath is cluster.kat (--config), required on the first init.
	ConfigPath string
	// DataDir holds the node's PKI, tokens and etcd data (--data-dir).
	DataDir string
	// NodeName is this node's name (--node-name). Default: the host name.
	NodeName string
	// AdvertiseAddress is the IP other nodes and katcall reach this node on
	// (--advertise-address). Default: the first non-loopback IPv4 address.
	AdvertiseAddress string
	// APIPort, AgentPort, EtcdClientPort and EtcdPeerPort override
	// cluster.kat's ports (--api-port, ...). Default 0: keep them.
	APIPort, AgentPort, EtcdClientPort, EtcdPeerPort int
	// EtcdEndpoints use an external etcd instead of the embedded one
	// (--etcd-endpoints), with EtcdCAFile, EtcdCertFile and EtcdKeyFile.
	EtcdEndpoints                         []string
	EtcdCAFile, EtcdCertFile, EtcdKeyFile string
	// PprofAddress, when set, serves Go's profiles (net/http/pprof) on this
	// loopback address (--pprof-address), for go tool pprof. Default: off.
	PprofAddress string
	// Depart, when it receives, makes the node depart for good
	// (agent.Depart): Run then returns an error wrapping agent.ErrDeparted.
	// kat-agent feeds it SIGUSR1; kat-agent depart asks through the
	// control socket (RequestDeparture) instead. Default nil: only the
	// control socket.
	Depart <-chan struct{}
	// Join makes Open join a cluster (kat-agent join) instead of creating
	// one, or resume a node that joined.
	Join bool
	// LeaderAPI is the host:port of the leader's API a node joins through
	// (--leader-api). Needed on the first join only.
	LeaderAPI string
	// EtcdPeer makes a first join join the embedded etcd quorum too
	// (--etcd-peer): the node becomes a member that may lead. Default: a
	// worker.
	EtcdPeer bool
	// AdminTokenFile holds the cluster's admin token (--admin-token-file,
	// a copy of the leader's DATA_DIR/admin.token): required with EtcdPeer
	// on the first join, as a member receives the CA key and the tokens.
	AdminTokenFile string
	// TokenFile holds the join token (--token-file), as init writes it to
	// DATA_DIR/join.token. Needed on the first join only.
	TokenFile string
	// RejoinGroup is the UDP multicast group and port of rejoin requests
	// (--rejoin-group): a worker detached from its cluster sends its
	// request there, a member answers. Default "": off (kat-agent's flag
	// defaults to rejoin.DefaultGroup).
	RejoinGroup string
	// NodeLabels are this node's labels (--node-label k=v). Default: the
	// saved ones.
	NodeLabels map[string]string
	// NodeType is the node's type (--node-type, such as stable or
	// laptop), registered as its label kat.dws.rip/nodeType so that
	// workloads may select on it. Default: the saved one, else none.
	NodeType string
	// ParentClusterName is the name of the cluster a node joins
	// (--parent-cluster-name): the join is refused when the leader's
	// cluster has another name. A worker that has one may detach when it
	// loses its cluster (see docs/detached.md). Default: the saved one,
	// else none (the node never detaches).
	ParentClusterName string
	// Detached are the ports of the control plane the node runs while
	// detached (--detached-api-port, --detached-etcd-client-port,
	// --detached-etcd-peer-port), kept in the node's state so later starts
	// need not repeat them. Default 0: the cluster's API and etcd ports.
	Detached DetachedPorts
	// Overlay configures the node's WireGuard device.
	Overlay OverlayOptions
	// Agent configures the node's agent (containers and builds).
	Agent AgentOptions
	// DrainDelay is how long, while this node leads, an instance about to
	// stop stays out of every list of ready instances before it is stopped
	// (--drain-delay). Default leader.DefaultDrainDelay (2s); 0 stops at
	// once.
	DrainDelay time.Duration
	// IngressCertDir is the directory of ingress certificate pairs the
	// leader imports (--ingress-cert-dir). Default DATA_DIR/ingress/certs.
	IngressCertDir string
	// ACME is how the leader gets ingress certificates from an ACME CA
	// (--acme-directory, --acme-email, --acme-ca-file). Default off.
	ACME ACMEOptions
	// ArchiveKeep is how many generations of each workload the leader
	// archives for history and rollback (--archive-keep). Default
	// resources.DefaultArchiveKeep (10), at least 2.
	ArchiveKeep int
}

// OverlayOptions configure the node's WireGuard overlay device.
// They are saved in the node's state at init or join; given again on a
// later start, they replace the saved ones (the node then reports its new
// port to the leader, and a kernel interface of the old name is left
// behind). Empty and zero mean "not given".
type OverlayOptions struct {
	// Interface is the WireGuard interface's name (--wg-interface), at
	// most 15 bytes. Nodes sharing a machine need different names: the
	// userspace device's socket /var/run/wireguard/NAME.sock is shared by
	// all network namespaces. Default: the saved one, else "kat0".
	Interface string
	// Port is the UDP port WireGuard listens on at the advertise address
	// (--wg-port). Default: the saved one, else 51820.
	Port int
	// Mode is auto, kernel, userspace or off (--wg-mode): auto uses the
	// kernel's WireGuard when the module is there, else the embedded
	// userspace device; off runs no overlay (other nodes cannot reach
	// this node's containers), for tests that run several agents in one
	// network namespace. Default: the saved one, else auto.
	Mode string
}

// AgentOptions configure the node agent: the container runtime, builds of
// app repositories, and the leader's app-repository polling.
type AgentOptions struct {
	// Podman is the podman binary (--podman). Default "podman".
	Podman string
	// PodmanRoot and PodmanRunRoot are podman's --root and --runroot.
	// Default: podman's own.
	PodmanRoot, PodmanRunRoot string
	// PodmanNetworkConfigDir and PodmanTmpDir are podman's
	// --network-config-dir and --tmpdir, so that several nodes can share a
	// machine. Default: podman's own.
	PodmanNetworkConfigDir, PodmanTmpDir string
	// PodmanNetwork is the name of the node's Podman network, which
	// instances with overlay addresses join (--podman-network). Default
	// agent.DefaultNetworkName.
	PodmanNetwork string
	// VolumeBasePath is where SimpleClusterStorage volumes live
	// (--volume-base-path). Default: cluster.kat volumeBasePath.
	VolumeBasePath string
	// MaxConcurrentPulls bounds image pulls in flight. Default 2.
	MaxConcurrentPulls int
	// MaxConcurrentSteps bounds container operations in flight. Default
	// agent.DefaultMaxConcurrentSteps().
	MaxConcurrentSteps int
	// HostPorts is where a container port is published on the host when
	// the port itself is taken (--host-port-range). Default
	// runtime.DefaultHostPorts.
	HostPorts runtime.PortRange
	// BuildDir holds app-repository clones and build logs. Default
	// DATA_DIR/builds.
	BuildDir string
	// RegistryAuthFile is podman's auth file for the build cache registry.
	RegistryAuthFile string
	// InsecureRegistries are build cache registries reached without TLS
	// verification (host:port).
	InsecureRegistries []string
	// KeepImages is how many kat-local images build housekeeping keeps per
	// workload. Default 3.
	KeepImages int
	// BuildTimeout bounds one image build. Default 10m.
	BuildTimeout time.Duration
	// MaxConcurrentBuilds bounds image builds in flight. Default 2.
	MaxConcurrentBuilds int
	// AppPollInterval is how often the leader resolves app repositories
	// without a webhook. Default: cluster.kat's gitops poll interval, else
	// gitsync's default.
	AppPollInterval time.Duration
	// AppAuth names the credential files of app repositories (leader
	// ls-remote and agent clones). Default: anonymous.
	AppAuth api.GitAuth
}

// Defaults of AgentOptions.
const (
	DefaultMaxConcurrentPulls  = 2
	DefaultKeepImages          = 3
	DefaultBuildTimeout        = 10 * time.Minute
	DefaultMaxConcurrentBuilds = 2
)

// Validate checks every option and returns all problems at once, each
// naming its flag.
func (o *Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir: must not be empty"))
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"api-port", o.APIPort}, {"agent-port", o.AgentPort}, {"etcd-client-port", o.EtcdClientPort}, {"etcd-peer-port", o.EtcdPeerPort}} {
		if p.v < 0 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("--%s: %d is not a port (1-65535)", p.flag, p.v))
		}
	}
	if o.AdvertiseAddress != "" {
		if ip := net.ParseIP(o.AdvertiseAddress); ip == nil || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("--advertise-address: %q is not a usable IP address", o.AdvertiseAddress))
		}
	}
	if o.LeaderAPI != "" {
		if _, port, err := net.SplitHostPort(o.LeaderAPI); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("--leader-api: %q must be HOST:PORT of the leader's API", o.LeaderAPI))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(o.NodeLabels)) {
		if p := quadlet.LabelKeyProblem(k); p != "" {
			errs = append(errs, fmt.Errorf("--node-label %q: %s", k, p))
		}
	}
	if o.NodeType != "" {
		if p := quadlet.DNSLabelProblem(o.NodeType); p != "" {
			errs = append(errs, fmt.Errorf("--node-type %q: %s", o.NodeType, p))
		}
		if v, ok := o.NodeLabels[resources.NodeTypeLabel]; ok && v != o.NodeType {
			errs = append(errs, fmt.Errorf("--node-label %s=%s: --node-type %s sets this label: give one of them", resources.NodeTypeLabel, v, o.NodeType))
		}
	}
	errs = append(errs, o.Detached.problems(o.AgentPort)...)
	if o.ParentClusterName != "" {
		if p := quadlet.DNSLabelProblem(o.ParentClusterName); p != "" {
			errs = append(errs, fmt.Errorf("--parent-cluster-name %q: %s", o.ParentClusterName, p))
		}
		if !o.Join {
			errs = append(errs, errors.New("--parent-cluster-name: only kat-agent join takes it (init creates its cluster)"))
		}
	}
	if p := resources.NodeNameProblem(o.NodeName); o.NodeName != "" && p != "" {
		errs = append(errs, fmt.Errorf("--node-name: %s", p))
	}
	for _, ep := range o.EtcdEndpoints {
		if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
			errs = append(errs, fmt.Errorf("--etcd-endpoints: %q must be an http:// or https:// URL", ep))
		}
	}
	if o.PprofAddress != "" {
		if host, _, err := net.SplitHostPort(o.PprofAddress); err != nil || !net.ParseIP(host).IsLoopback() {
			errs = append(errs, fmt.Errorf("--pprof-address: %q must be a loopback address and port, such as 127.0.0.1:6060", o.PprofAddress))
		}
	}
	if o.RejoinGroup != "" {
		if a, err := net.ResolveUDPAddr("udp4", o.RejoinGroup); err != nil || !a.IP.IsMulticast() || a.Port == 0 {
			errs = append(errs, fmt.Errorf("--rejoin-group: %q must be an IPv4 multicast address and port, such as %s, or empty (off)", o.RejoinGroup, rejoin.DefaultGroup))
		}
	}
	if d := o.ACME.Directory; d != "" {
		if u, err := url.Parse(d); err != nil || u.Scheme != "https" || u.Host == "" {
			errs = append(errs, fmt.Errorf("--acme-directory: %q must be an https:// URL", d))
		}
	}
	if o.ACME.Directory == "" && (o.ACME.Email != "" || o.ACME.CAFile != "" || o.ACME.UnroutedGrace != 0) {
		errs = append(errs, errors.New("--acme-email, --acme-ca-file and --acme-unrouted-grace need --acme-directory"))
	}
	if o.ACME.UnroutedGrace < 0 {
		errs = append(errs, fmt.Errorf("--acme-unrouted-grace: %s is negative", o.ACME.UnroutedGrace))
	}
	if o.DrainDelay < 0 || o.DrainDelay > time.Hour {
		errs = append(errs, fmt.Errorf("--drain-delay: %s must be between 0s and 1h", o.DrainDelay))
	}
	if o.ArchiveKeep != 0 && o.ArchiveKeep < 2 {
		errs = append(errs, fmt.Errorf("--archive-keep: %d must be at least 2 (the previous generation is always kept)", o.ArchiveKeep))
	}
	if o.Overlay.Interface != "" {
		if p := netstack.InterfaceNameProblem(o.Overlay.Interface); p != "" {
			errs = append(errs, fmt.Errorf("--wg-interface: %s", p))
		}
	}
	if o.Overlay.Port < 0 || o.Overlay.Port > 65535 {
		errs = append(errs, fmt.Errorf("--wg-port: %d is not a port (1-65535)", o.Overlay.Port))
	}
	if _, err := netstack.ParseMode(o.Overlay.Mode); err != nil {
		errs = append(errs, fmt.Errorf("--wg-mode: %w", err))
	}
	if (o.EtcdCertFile == "") != (o.EtcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile must be given together"))
	}
	if err := o.Agent.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (o *AgentOptions) validate() error {
	var errs []error
	for _, c := range []struct {
		flag string
		v    int
	}{{"max-concurrent-pulls", o.MaxConcurrentPulls}, {"max-concurrent-steps", o.MaxConcurrentSteps},
		{"keep-images", o.KeepImages}, {"max-concurrent-builds", o.MaxConcurrentBuilds}} {
		if c.v < 1 {
			errs = append(errs, fmt.Errorf("--%s: %d must be at least 1", c.flag, c.v))
		}
	}
	if err := o.HostPorts.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--host-port-range: %w", err))
	}
	if o.PodmanNetwork != "" {
		if err := runtime.ValidateNetworkName(o.PodmanNetwork); err != nil {
			errs = append(errs, fmt.Errorf("--podman-network: %w", err))
		}
	}
	if o.BuildTimeout < time.Second {
		errs = append(errs, fmt.Errorf("--build-timeout: %s must be at least 1s", o.BuildTimeout))
	}
	if o.AppPollInterval != 0 && o.AppPollInterval < time.Second {
		errs = append(errs, fmt.Errorf("--app-poll-interval: %s must be at least 1s", o.AppPollInterval))
	}
	a := o.AppAuth
	n := 0
	for _, f := range []string{a.TokenFile, a.BasicAuthFile, a.SSHKeyFile} {
		if f != "" {
			n++
		}
	}
	if n > 1 {
		errs = append(errs, errors.New("--app-repo-token-file, --app-repo-basic-auth-file and --app-repo-ssh-key-file: give at most one"))
	}
	if a.SSHKeyFile != "" && a.KnownHostsFile == "" {
		errs = append(errs, errors.New("--app-repo-ssh-key-file needs --app-repo-known-hosts-file"))
	}
	return errors.Join(errs...)
}

// DefaultAgentOptions returns the agent options a node runs with when no
// flag says otherwise.
func DefaultAgentOptions() AgentOptions {
	return AgentOptions{
		Podman: "podman", MaxConcurrentPulls: DefaultMaxConcurrentPulls, MaxConcurrentSteps: agent.DefaultMaxConcurrentSteps(),
		HostPorts:  runtime.DefaultHostPorts,
		KeepImages: DefaultKeepImages, BuildTimeout: DefaultBuildTimeout, MaxConcurrentBuilds: DefaultMaxConcurrentBuilds,
	}
}

// defaultNodeName is the host name, lowercased and cut to a DNS label.
func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil {
		return "kat-node"
	}
	h = strings.ToLower(strings.SplitN(h, ".", 2)[0])
	if resources.NodeNameProblem(h) != "" {
		return "kat-node"
	}
	return h
}

// defaultAdvertiseAddress is the first non-loopback IPv4 address of an
// interface that is up, or 127.0.0.1.
func defaultAdvertiseAddress() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// ACMEOptions configure the leader's ACME client.
type ACMEOptions struct {
	// Directory is the CA's directory URL (https://); "" turns ACME off.
	Directory string
	// Email is the account's contact address.
	Email string
	// CAFile holds PEM certificates trusted, beside the system's, for the
	// directory's TLS.
	CAFile string
	// UnroutedGrace is how long the certificate of a host no longer routed
	// is kept (--acme-unrouted-grace); 0 takes the leader's default.
	UnroutedGrace time.Duration
}

// DetachedPorts are the ports of a detached node's own control plane; a
// zero one is the cluster's (cluster.kat, or --api-port and the etcd port
// flags).
type DetachedPorts struct {
	APIPort        int `json:"apiPort,omitempty"`
	EtcdClientPort int `json:"etcdClientPort,omitempty"`
	EtcdPeerPort   int `json:"etcdPeerPort,omitempty"`
}

// problems says what is wrong with the ports set, each naming its flag: a
// port out of range, or one given twice among them and agentPort (the
// agent's, which the detached node's agent keeps; 0: not given).
func (p DetachedPorts) problems(agentPort int) []error {
	var errs []error
	seen := map[int]string{}
	if agentPort != 0 {
		seen[agentPort] = "--agent-port"
	}
	for _, f := range []struct {
		flag string
		v    int
	}{{"--detached-api-port", p.APIPort}, {"--detached-etcd-client-port", p.EtcdClientPort}, {"--detached-etcd-peer-port", p.EtcdPeerPort}} {
		switch {
		case f.v == 0:
		case f.v < 0 || f.v > 65535:
			errs = append(errs, fmt.Errorf("%s: %d is not a port (1-65535)", f.flag, f.v))
		case seen[f.v] != "":
			errs = append(errs, fmt.Errorf("%s: port %d is %s's too: each needs its own", f.flag, f.v, seen[f.v]))
		default:
			seen[f.v] = f.flag
		}
	}
	return errs
}
