package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/quadlet"
)

// initOptions are the flags of kat-agent init.
type initOptions struct {
	configPath     string
	dataDir        string
	nodeName       string
	advertise      string
	apiPort        int
	agentPort      int
	etcdClientPort int
	etcdPeerPort   int
	etcdEndpoints  []string
	etcdCAFile     string
	etcdCertFile   string
	etcdKeyFile    string
	logLevel       string
	logFormat      string
	changed        func(name string) bool
	agent          agentOptions
}

func newInitCommand() *cobra.Command {
	o := &initOptions{}
	cmd := &cobra.Command{
		Use:   "init --config cluster.kat --data-dir DIR",
		Short: "Create a cluster and run its first leader, or resume it from DIR",
		Long: `init creates a new KAT cluster from cluster.kat: the cluster CA and the leader's
certificate, an admin token and a join token, an embedded etcd in DIR/etcd, and the
namespaces kat-core and default. It then becomes leader, serves the API over HTTPS
and writes DIR/katcall.yaml for katcall.

Run again on the same data directory, init resumes the same cluster: same CA, same
tokens, all state kept. The cluster configuration is fixed at the first init; flags
given on a later run override the ports and addresses this node uses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.changed = func(name string) bool { return cmd.Flags().Changed(name) }
			if err := o.validate(); err != nil {
				return err
			}
			return runInit(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.configPath, "config", "", "path of cluster.kat (required on the first init)")
	f.StringVar(&o.dataDir, "data-dir", "/var/lib/kat", "directory for this node's PKI, tokens and etcd data")
	f.StringVar(&o.nodeName, "node-name", "", "this node's name (default: the host name)")
	f.StringVar(&o.advertise, "advertise-address", "", "IP address other nodes and katcall reach this node on (default: the first non-loopback IPv4 address)")
	f.IntVar(&o.apiPort, "api-port", 0, "API port (default: cluster.kat apiPort, 9115)")
	f.IntVar(&o.agentPort, "agent-port", 0, "agent port (default: cluster.kat agentPort, 9116)")
	f.IntVar(&o.etcdClientPort, "etcd-client-port", 0, "embedded etcd client port (default: cluster.kat etcdClientPort, 2379)")
	f.IntVar(&o.etcdPeerPort, "etcd-peer-port", 0, "embedded etcd peer port (default: cluster.kat etcdPeerPort, 2380)")
	f.StringSliceVar(&o.etcdEndpoints, "etcd-endpoints", nil, "use this external etcd cluster instead of the embedded one (comma-separated URLs)")
	f.StringVar(&o.etcdCAFile, "etcd-cafile", "", "CA certificate of the external etcd")
	f.StringVar(&o.etcdCertFile, "etcd-certfile", "", "client certificate for the external etcd")
	f.StringVar(&o.etcdKeyFile, "etcd-keyfile", "", "client key for the external etcd")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "auto", "log format: json, console, or auto (console on a terminal)")
	o.agent.addFlags(cmd)
	return cmd
}

func (o *initOptions) validate() error {
	var errs []error
	if o.dataDir == "" {
		errs = append(errs, errors.New("--data-dir: must not be empty"))
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"api-port", o.apiPort}, {"agent-port", o.agentPort}, {"etcd-client-port", o.etcdClientPort}, {"etcd-peer-port", o.etcdPeerPort}} {
		if o.changed(p.flag) && (p.v < 1 || p.v > 65535) {
			errs = append(errs, fmt.Errorf("--%s: %d is not a port (1-65535)", p.flag, p.v))
		}
	}
	if o.advertise != "" {
		if ip := net.ParseIP(o.advertise); ip == nil || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("--advertise-address: %q is not a usable IP address", o.advertise))
		}
	}
	if o.nodeName != "" && !quadlet.IsDNSLabel(o.nodeName) {
		errs = append(errs, fmt.Errorf("--node-name: %q must be a DNS label (lowercase letters, digits and '-')", o.nodeName))
	}
	for _, ep := range o.etcdEndpoints {
		if !strings.HasPrefix(ep, "http://") && !strings.HasPrefix(ep, "https://") {
			errs = append(errs, fmt.Errorf("--etcd-endpoints: %q must be an http:// or https:// URL", ep))
		}
	}
	if (o.etcdCertFile == "") != (o.etcdKeyFile == "") {
		errs = append(errs, errors.New("--etcd-certfile and --etcd-keyfile must be given together"))
	}
	switch o.logLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", o.logLevel))
	}
	switch o.logFormat {
	case "auto", "json", "console":
	default:
		errs = append(errs, fmt.Errorf("--log-format: %q is not one of auto, json, console", o.logFormat))
	}
	if err := o.agent.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// defaultNodeName is the host name, lowercased and cut to a DNS label.
func defaultNodeName() string {
	h, err := os.Hostname()
	if err != nil {
		return "kat-node"
	}
	h = strings.ToLower(strings.SplitN(h, ".", 2)[0])
	if !quadlet.IsDNSLabel(h) {
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
