package main

import (
	"github.com/spf13/cobra"

	"kat.dws.rip/kat/node"
)

func newJoinCommand() *cobra.Command {
	o := node.Options{Agent: node.DefaultAgentOptions()}
	var lf initFlags
	cmd := &cobra.Command{
		Use:   "join --leader-api HOST:PORT --token-file FILE --data-dir DIR",
		Short: "Join this machine to a cluster as a worker node and run it, or resume it from DIR",
		Long: `join asks the leader at --leader-api to admit this node. The token (a copy of the
leader's DATA_DIR/join.token) names the cluster CA's fingerprint: join checks the
leader's CA against it before it sends the token's secret. The leader signs a node
certificate (its common name is the node name) and registers the node; the node
then runs its agent in the foreground, reaching the cluster's etcd with that
certificate.

With --etcd-peer (and --admin-token-file) the node also joins the embedded etcd quorum (up to cluster.kat's
spec.etcdMembers, default 3): the leader adds it as an etcd learner and hands it the
CA key and the cluster's tokens; it promotes itself to a voting member once caught
up, campaigns for the leadership, serves the API (forwarding to the leader while it
does not lead) and writes DATA_DIR/katcall.yaml. Members join one at a time.

Run again on the same data directory, join resumes the node without the token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Join = true
			return runNode(cmd, o, lf)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.LeaderAPI, "leader-api", "", "HOST:PORT of the leader's API (required on the first join)")
	f.StringVar(&o.TokenFile, "token-file", "", "file with the join token: a copy of the leader's DATA_DIR/join.token (required on the first join)")
	f.BoolVar(&o.EtcdPeer, "etcd-peer", false, "join the embedded etcd quorum as a member that may lead (first join only; refused when the quorum is full; needs --admin-token-file)")
	f.StringVar(&o.AdminTokenFile, "admin-token-file", "", "file with the cluster's admin token, a copy of the leader's DATA_DIR/admin.token (required with --etcd-peer: a member receives the CA key and the tokens)")
	f.StringVar(&o.ParentClusterName, "parent-cluster-name", "", "name of the cluster to join (cluster.kat metadata.name): the join is refused when the leader's cluster has another name; a worker with one detaches when it loses its cluster (docs/detached.md)")
	f.IntVar(&o.Detached.APIPort, "detached-api-port", 0, "API port of the control plane this worker runs while detached (docs/detached.md; default: the cluster's API port)")
	f.IntVar(&o.Detached.EtcdClientPort, "detached-etcd-client-port", 0, "etcd client port of the control plane this worker runs while detached (default: the cluster's)")
	f.IntVar(&o.Detached.EtcdPeerPort, "detached-etcd-peer-port", 0, "etcd peer port of the control plane this worker runs while detached (default: the cluster's)")
	f.StringVar(&o.NodeType, "node-type", "", "this node's type, such as stable or laptop: the label kat.dws.rip/nodeType, for workloads' nodeSelector")
	f.StringVar(&o.DataDir, "data-dir", "/var/lib/kat", "directory for this node's certificate, key and state")
	addNodeFlags(f, &o, &lf, "9116")
	return cmd
}
