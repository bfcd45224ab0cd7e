package main

import (
	"github.com/spf13/cobra"

	"kat.dws.rip/kat/node"
)

func newInitCommand() *cobra.Command {
	o := node.Options{Agent: node.DefaultAgentOptions()}
	var lf initFlags
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
		RunE: func(cmd *cobra.Command, _ []string) error { return runNode(cmd, o, lf) },
	}
	f := cmd.Flags()
	f.StringVar(&o.ConfigPath, "config", "", "path of cluster.kat (required on the first init)")
	f.StringVar(&o.DataDir, "data-dir", "/var/lib/kat", "directory for this node's PKI, tokens and etcd data")
	f.IntVar(&o.APIPort, "api-port", 0, "API port (default: cluster.kat apiPort, 9115)")
	f.IntVar(&o.EtcdClientPort, "etcd-client-port", 0, "embedded etcd client port (default: cluster.kat etcdClientPort, 2379)")
	f.IntVar(&o.EtcdPeerPort, "etcd-peer-port", 0, "embedded etcd peer port (default: cluster.kat etcdPeerPort, 2380)")
	f.StringSliceVar(&o.EtcdEndpoints, "etcd-endpoints", nil, "use this external etcd cluster instead of the embedded one (comma-separated URLs)")
	f.StringVar(&o.EtcdCAFile, "etcd-cafile", "", "CA certificate of the external etcd")
	f.StringVar(&o.EtcdCertFile, "etcd-certfile", "", "client certificate for the external etcd")
	f.StringVar(&o.EtcdKeyFile, "etcd-keyfile", "", "client key for the external etcd")
	addNodeFlags(f, &o, &lf, "cluster.kat agentPort, 9116")
	return cmd
}
