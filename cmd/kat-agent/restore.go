package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/node"
)

func newRestoreCommand() *cobra.Command {
	var o node.RestoreOptions
	var logLevel string
	cmd := &cobra.Command{
		Use:   "restore --snapshot FILE --data-dir DIR [--from-data-dir OLD_DIR]",
		Short: "Prepare a new data directory from an etcd snapshot, for kat-agent init to resume",
		Long: `restore checks an etcd snapshot (one the leader wrote into cluster.kat's backupPath,
or katcall backup printed) and restores it into DIR/etcd as the only member of a new
etcd cluster. Then run kat-agent init --data-dir DIR on this node: it becomes the
leader of a single-node cluster with the snapshot's desired state, namespaces,
Git sources, events and token hashes, and redeploys the workloads; other nodes join
it again with kat-agent join (after clearing their data directories).

The snapshot holds no private keys and only the hashes of the tokens. With
--from-data-dir (the old leader's data directory, or a copy of it) the cluster CA
and the admin and join tokens are copied from it, so existing katcall.yaml files and
join tokens keep working. Without it, init creates a new CA and new tokens and makes
them the cluster's; the old ones stop working.

restore records the node's name, address and etcd peer port in DIR/node.json, where
init finds them: do not give init different ones. DIR must not exist or be empty; the
cluster configuration comes from the snapshot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := (initFlags{logLevel: logLevel, logFormat: "auto"}).validate(); err != nil {
				return err
			}
			res, err := node.Restore(o, node.NewLogger(logLevel, "auto", os.Stderr))
			if err != nil {
				return err
			}
			credentials := "new CA, admin token and join token on the first start"
			if res.KeptCredentials {
				credentials = "CA, admin token and join token copied from " + o.FromDataDir
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored cluster %s (%s) at revision %d (%d keys) into %s as node %s; %s.\n"+
				"Start it with: kat-agent init --data-dir %s\n",
				res.ClusterName, res.ClusterUID, res.Revision, res.Keys, o.DataDir, res.NodeName, credentials, o.DataDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.SnapshotPath, "snapshot", "", "etcd snapshot file to restore (required)")
	f.StringVar(&o.DataDir, "data-dir", "", "new data directory for the restored node; must not exist or be empty (required)")
	f.StringVar(&o.FromDataDir, "from-data-dir", "", "the old leader's data directory (or a copy): keep its CA, admin token and join token (default: init makes new ones)")
	f.BoolVar(&o.DiscardSecrets, "discard-secrets", false, "without --from-data-dir, delete the snapshot's secrets (a new CA cannot open them) rather than refuse")
	f.StringVar(&o.NodeName, "node-name", "", "the restored node's name (default: --from-data-dir's, else the host name)")
	f.StringVar(&o.AdvertiseAddress, "advertise-address", "", "the restored node's IP address (default: --from-data-dir's, else the first non-loopback IPv4 address)")
	f.IntVar(&o.EtcdPeerPort, "etcd-peer-port", 0, "the restored etcd member's peer port (default: --from-data-dir's, else the snapshot's cluster.kat etcdPeerPort)")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}
