package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"kat.dws.rip/kat/detach/rejoin"
	"kat.dws.rip/kat/node"
	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/reconcile/leader"
	"kat.dws.rip/kat/store/resources"
)

// gcPercent is kat-agent's garbage collection target (GOGC) unless the
// environment sets one: the heap may grow 30% of its live size, not Go's
// 100%, before a collection. A leader's heap is mostly its caches of every
// workload, so its resident set follows the heap's goal; the price is more
// collection work (the commit that set it has the figures).
const gcPercent = 30

// initFlags are the flags of kat-agent init and join that are not
// node.Options fields.
type initFlags struct {
	logLevel   string
	logFormat  string
	cpuProfile string
}

// addNodeFlags adds the flags init and join share: this node's identity,
// logging and profiling, and its agent's.
func addNodeFlags(f *pflag.FlagSet, o *node.Options, lf *initFlags, agentPortDefault string) {
	f.StringVar(&o.NodeName, "node-name", "", "this node's name (default: the host name)")
	f.StringVar(&o.AdvertiseAddress, "advertise-address", "", "IP address other nodes and katcall reach this node on (default: the first non-loopback IPv4 address)")
	f.IntVar(&o.AgentPort, "agent-port", 0, "agent port (default: "+agentPortDefault+")")
	f.StringVar(&o.RejoinGroup, "rejoin-group", rejoin.DefaultGroup, "UDP multicast group:port of rejoin requests: a detached worker sends its request there, etcd members answer (docs/detached.md); empty: off")
	f.StringToStringVar(&o.NodeLabels, "node-label", nil, "a label of this node, KEY=VALUE (repeatable), for workloads' nodeSelector")
	f.StringVar(&o.Overlay.Interface, "wg-interface", "", "name of the WireGuard overlay interface, at most 15 bytes; nodes sharing a machine need different names (default: the saved one, else kat0)")
	f.IntVar(&o.Overlay.Port, "wg-port", 0, "UDP port of the WireGuard overlay at the advertise address (default: the saved one, else 51820)")
	f.StringVar(&o.Overlay.Mode, "wg-mode", "", "WireGuard implementation: auto (the kernel module if loaded, else userspace), kernel, userspace, or off (no overlay) (default: the saved one, else auto)")
	f.StringVar(&lf.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&lf.logFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")
	f.StringVar(&lf.cpuProfile, "cpu-profile", "", "write a CPU profile (go tool pprof) of the whole run to this file")
	f.StringVar(&o.PprofAddress, "pprof-address", "", "serve Go's profiles (heap, CPU, goroutines: net/http/pprof) on this loopback address, e.g. 127.0.0.1:6060")
	f.DurationVar(&o.DrainDelay, "drain-delay", leader.DefaultDrainDelay, "while leading: how long an instance about to stop stays out of every ready list (status, DNS) before it gets SIGTERM; 0 stops at once")
	f.StringVar(&o.IngressCertDir, "ingress-cert-dir", "", "while leading: the directory of ingress certificate pairs NAME.crt (PEM chain, leaf first) and NAME.key (PEM key) that spec.ingress[].tlsCertificate names; keep the same files on every etcd member (default: DATA_DIR/ingress/certs)")
	f.StringVar(&o.ACME.Directory, "acme-directory", "", "while leading: the ACME directory URL that issues certificates for ingress hosts with tls and no tlsCertificate, e.g. https://acme-v02.api.letsencrypt.org/directory (default: none, ACME off)")
	f.StringVar(&o.ACME.Email, "acme-email", "", "while leading: the contact address of the ACME account")
	f.DurationVar(&o.ACME.UnroutedGrace, "acme-unrouted-grace", 0, "while leading: how long the ACME certificate of a host no ingress rule routes any more is kept before it is deleted (default 168h)")
	f.StringVar(&o.ACME.CAFile, "acme-ca-file", "", "while leading: PEM certificates to trust, beside the system's, for the ACME directory's own TLS (a test CA such as Pebble's)")
	f.IntVar(&o.ArchiveKeep, "archive-keep", resources.DefaultArchiveKeep, "while leading: how many generations of each workload to keep for katcall history and rollback (at least 2)")
	addAgentFlags(f, &o.Agent)
}

// runNode opens the node of o and runs it in the foreground until the
// command's context ends.
func runNode(cmd *cobra.Command, o node.Options, lf initFlags) error {
	if err := errors.Join(explicitZeroPorts(cmd.Flags()), lf.validate()); err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	log := node.NewLogger(lf.logLevel, lf.logFormat, os.Stderr)
	if lf.cpuProfile != "" {
		stop, err := startCPUProfile(lf.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	// SIGUSR1 departs for good; SIGTERM (a stop or a restart) leaves the
	// instances where they are.
	depart := make(chan struct{}, 1)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	sigCtx, stopSignals := context.WithCancel(cmd.Context())
	defer stopSignals()
	go func() {
		select {
		case <-usr1:
			depart <- struct{}{}
		case <-sigCtx.Done():
		}
	}()
	o.Depart = depart
	n, err := node.Open(cmd.Context(), o, log)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Run(cmd.Context())
}

// addAgentFlags adds the flags of the node agent (containers and builds).
func addAgentFlags(f *pflag.FlagSet, a *node.AgentOptions) {
	f.StringVar(&a.Podman, "podman", a.Podman, "podman binary that runs this node's containers")
	f.StringVar(&a.PodmanRoot, "podman-root", "", "podman storage root (--root; default: podman's)")
	f.StringVar(&a.PodmanRunRoot, "podman-runroot", "", "podman run root (--runroot; default: podman's)")
	f.StringVar(&a.PodmanNetworkConfigDir, "podman-network-config-dir", "", "podman network config dir (--network-config-dir; default: podman's), so that several nodes can share one machine")
	f.StringVar(&a.PodmanTmpDir, "podman-tmpdir", "", "podman tmpdir (--tmpdir, where its event log lives; default: podman's)")
	f.StringVar(&a.PodmanNetwork, "podman-network", agent.DefaultNetworkName, "name of the node's Podman network, which instances with overlay addresses join (one per node; choose another when several nodes share one podman network config dir)")
	f.StringVar(&a.VolumeBasePath, "volume-base-path", "", "where SimpleClusterStorage volumes live (default: cluster.kat volumeBasePath, /var/lib/kat/volumes)")
	f.IntVar(&a.MaxConcurrentPulls, "max-concurrent-pulls", a.MaxConcurrentPulls, "image pulls in flight at most")
	f.IntVar(&a.MaxConcurrentSteps, "max-concurrent-steps", a.MaxConcurrentSteps, "container operations (create, start, remove, health check) in flight at most")
	f.Var(&a.HostPorts, "host-port-range", "host ports a container port is published on when the port itself is taken (keep it out of net.ipv4.ip_local_port_range)")
	f.StringVar(&a.BuildDir, "build-dir", "", "where app-repository clones and build logs live (default: DATA_DIR/builds)")
	f.StringVar(&a.RegistryAuthFile, "registry-auth-file", "", "podman auth file with the build cache registry's credentials (default: podman's)")
	f.StringSliceVar(&a.InsecureRegistries, "insecure-registry", nil, "build cache registry (host:port) reached without TLS verification; repeatable")
	f.IntVar(&a.KeepImages, "keep-images", a.KeepImages, "kat-local images kept per workload by build housekeeping")
	f.DurationVar(&a.BuildTimeout, "build-timeout", a.BuildTimeout, "bound of one image build (cache pull, clone, podman build, push)")
	f.IntVar(&a.MaxConcurrentBuilds, "max-concurrent-builds", a.MaxConcurrentBuilds, "image builds in flight at most")
	f.StringVar(&a.AppAuth.TokenFile, "app-repo-token-file", "", "token (first line) for app repositories over HTTPS, sent as the basic-auth password (default: anonymous)")
	f.StringVar(&a.AppAuth.Username, "app-repo-username", "", "user sent with --app-repo-token-file (default x-access-token), or the SSH user (default git)")
	f.StringVar(&a.AppAuth.BasicAuthFile, "app-repo-basic-auth-file", "", "file with user:password for app repositories over HTTPS")
	f.StringVar(&a.AppAuth.SSHKeyFile, "app-repo-ssh-key-file", "", "unencrypted PEM private key for ssh:// app repositories (needs --app-repo-known-hosts-file)")
	f.StringVar(&a.AppAuth.KnownHostsFile, "app-repo-known-hosts-file", "", "known_hosts file SSH host keys of app repositories are checked against")
	f.DurationVar(&a.AppPollInterval, "app-poll-interval", 0, "how often the leader resolves app repositories' branches without a webhook (default: cluster.kat gitops pollIntervalSeconds, else 30s)")
}

// explicitZeroPorts refuses a port flag given as 0: unset ports are 0 in
// node.Options, so an explicit 0 would silently mean "keep".
func explicitZeroPorts(f *pflag.FlagSet) error {
	var errs []error
	for _, name := range []string{"api-port", "agent-port", "etcd-client-port", "etcd-peer-port", "wg-port",
		"detached-api-port", "detached-etcd-client-port", "detached-etcd-peer-port"} {
		if fl := f.Lookup(name); fl != nil && fl.Changed && fl.Value.String() == "0" {
			errs = append(errs, fmt.Errorf("--%s: 0 is not a port (1-65535)", name))
		}
	}
	return errors.Join(errs...)
}

func (lf initFlags) validate() error {
	var errs []error
	switch lf.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", lf.logLevel))
	}
	switch lf.logFormat {
	case "auto", "json", "console":
	default:
		errs = append(errs, fmt.Errorf("--log-format: %q is not one of auto, json, console", lf.logFormat))
	}
	return errors.Join(errs...)
}

// startCPUProfile profiles the process's CPU into path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
