package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// RestoreOptions are the flags of kat-agent restore.
type RestoreOptions struct {
	// SnapshotPath is the etcd snapshot to restore (--snapshot). Required.
	SnapshotPath string
	// DataDir is the new node's data directory (--data-dir); it must not
	// exist or be empty. Required.
	DataDir string
	// FromDataDir is the old leader's data directory, or a copy of it
	// (--from-data-dir): its CA, admin token and join token are carried
	// over, and its node name, address, labels and overlay settings are the
	// defaults of the new node's. Default none: the restored cluster gets
	// a new CA and new tokens at its first start.
	FromDataDir string
	// DiscardSecrets lets a restore without FromDataDir go on when the
	// snapshot holds secrets, which the first start then deletes (a new CA
	// cannot open them). Default false: such a restore is refused.
	DiscardSecrets bool
	// NodeName, AdvertiseAddress and EtcdPeerPort name the restored etcd
	// member; node.json records them for kat-agent init. Defaults: FromDataDir's,
	// else those of init (the host name, the first non-loopback IPv4
	// address, the snapshot's cluster.kat etcdPeerPort).
	NodeName         string
	AdvertiseAddress string
	EtcdPeerPort     int
}

// RestoreResult describes a restored data directory.
type RestoreResult struct {
	ClusterUID  string
	ClusterName string
	NodeName    string
	// Revision and Keys describe the snapshot restored.
	Revision int64
	Keys     int
	// KeptCredentials is true when the CA and tokens came from
	// FromDataDir; false when the first start makes new ones.
	KeptCredentials bool
}

// credentialFiles are the files a restore carries over from the old
// leader's data directory, relative to it.
var credentialFiles = []string{"pki/ca.crt", "pki/ca.key", "admin.token", "join.token"}

// Restore prepares o.DataDir from an etcd snapshot (docs/backup-restore.md)
// so that "kat-agent init --data-dir DIR" resumes the snapshot's cluster as the
// only member of a new etcd cluster: the snapshot is checked, restored
// with etcdutl into DIR/etcd under this node's member name and peer URL,
// and node.json records the snapshot's cluster (its UID and cluster.kat).
// With o.FromDataDir the CA and both tokens are copied, so katcall
// configurations and join tokens stay valid; without it, init makes a new
// CA and new tokens and replaces the tokens' hashes in etcd. A refused
// option or snapshot leaves nothing behind.
func Restore(o RestoreOptions, log zerolog.Logger) (*RestoreResult, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	snap, err := store.VerifySnapshot(o.SnapshotPath)
	if err != nil {
		return nil, fmt.Errorf("--snapshot %s: %w", o.SnapshotPath, err)
	}
	info, err := resources.SnapshotClusterInfo(o.SnapshotPath)
	if err != nil {
		return nil, fmt.Errorf("--snapshot %s: %w", o.SnapshotPath, err)
	}
	if o.FromDataDir == "" && !o.DiscardSecrets {
		n, err := resources.SnapshotSecrets(o.SnapshotPath)
		if err != nil {
			return nil, fmt.Errorf("--snapshot %s: %w", o.SnapshotPath, err)
		}
		if n > 0 {
			return nil, fmt.Errorf("--snapshot %s: holds %d secrets sealed with the cluster's CA key: restore with --from-data-dir "+
				"(the old data directory or a copy holding pki/ca.key), or --discard-secrets to delete them (secret files in Git "+
				"must then be encrypted to the new cluster's recipient)", o.SnapshotPath, n)
		}
	}
	var old *nodeState
	if o.FromDataDir != "" {
		if old, err = oldLeaderState(dataDir(o.FromDataDir), info.UID); err != nil {
			return nil, err
		}
	}
	st := restoredState(o, old, info)
	d := dataDir(o.DataDir)
	created, err := prepareEmptyDir(o.DataDir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			clearDir(o.DataDir, created)
		}
	}()
	peerURL := "https://" + net.JoinHostPort(st.AdvertiseAddress, strconv.Itoa(st.Cluster.Spec.EtcdPeerPort))
	if err := store.RestoreSnapshot(store.RestoreConfig{
		SnapshotPath: o.SnapshotPath, DataDir: d.etcdDir(), Name: st.NodeName, PeerURL: peerURL,
		ClusterToken: store.DefaultInitialClusterToken + "-" + uuid.NewString()[:8],
	}); err != nil {
		return nil, err
	}
	if old != nil {
		for _, f := range credentialFiles {
			if err := copyPrivate(filepath.Join(o.FromDataDir, f), d.path(f)); err != nil {
				return nil, fmt.Errorf("--from-data-dir: %w", err)
			}
		}
	}
	if err := saveNodeState(d, st); err != nil {
		return nil, err
	}
	ok = true
	log.Info().Str("cluster_uid", info.UID).Str("node", st.NodeName).Str("peer_url", peerURL).
		Int64("revision", snap.Revision).Int("keys", snap.Keys).Bool("kept_credentials", old != nil).
		Str("data_dir", o.DataDir).Msg("snapshot restored")
	return &RestoreResult{
		ClusterUID: info.UID, ClusterName: info.Name, NodeName: st.NodeName,
		Revision: snap.Revision, Keys: snap.Keys, KeptCredentials: old != nil,
	}, nil
}

func (o *RestoreOptions) validate() error {
	var errs []error
	if o.SnapshotPath == "" {
		errs = append(errs, errors.New("--snapshot: required (an etcd snapshot file, such as one katcall backup printed)"))
	}
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir: required (a new directory for the restored node)"))
	}
	if o.FromDataDir != "" && o.DataDir != "" && filepath.Clean(o.FromDataDir) == filepath.Clean(o.DataDir) {
		errs = append(errs, errors.New("--from-data-dir: must differ from --data-dir (restore into a new directory)"))
	}
	if o.AdvertiseAddress != "" {
		if ip := net.ParseIP(o.AdvertiseAddress); ip == nil || ip.IsUnspecified() {
			errs = append(errs, fmt.Errorf("--advertise-address: %q is not a usable IP address", o.AdvertiseAddress))
		}
	}
	if p := resources.NodeNameProblem(o.NodeName); o.NodeName != "" && p != "" {
		errs = append(errs, fmt.Errorf("--node-name: %s", p))
	}
	if o.EtcdPeerPort < 0 || o.EtcdPeerPort > 65535 {
		errs = append(errs, fmt.Errorf("--etcd-peer-port: %d is not a port (1-65535)", o.EtcdPeerPort))
	}
	return errors.Join(errs...)
}

// oldLeaderState reads the old leader's data directory: it must be the
// data directory of a node that ran init for the snapshot's cluster, and
// hold the CA and both tokens.
func oldLeaderState(d dataDir, clusterUID string) (*nodeState, error) {
	old, err := loadNodeState(d)
	if err != nil {
		return nil, fmt.Errorf("--from-data-dir: %w", err)
	}
	switch {
	case old == nil:
		return nil, fmt.Errorf("--from-data-dir: %s has no node.json: not a kat-agent data directory", d)
	case old.Role == roleWorker:
		return nil, fmt.Errorf("--from-data-dir: %s is a worker's data directory; give the leader's (the node that ran kat-agent init), which holds the CA key", d)
	case old.ClusterUID != clusterUID:
		return nil, fmt.Errorf("--from-data-dir: %s belongs to cluster %s, but the snapshot to cluster %s", d, old.ClusterUID, clusterUID)
	}
	for _, f := range credentialFiles {
		if _, err := os.Stat(d.path(f)); err != nil {
			return nil, fmt.Errorf("--from-data-dir: %w", err)
		}
	}
	return old, nil
}

// restoredState is node.json of the restored node: the snapshot's cluster
// (the old leader's node.json's, with its ports, when there is one), this
// node's identity from the options, else the old leader's, else init's
// defaults.
func restoredState(o RestoreOptions, old *nodeState, info *resources.ClusterInfo) *nodeState {
	st := &nodeState{
		NodeName: defaultNodeName(), NodeUID: uuid.NewString(), ClusterUID: info.UID,
		AdvertiseAddress: defaultAdvertiseAddress(), Cluster: info.Config, ResetTokens: old == nil,
	}
	if old != nil {
		st.NodeName, st.NodeUID, st.AdvertiseAddress = old.NodeName, old.NodeUID, old.AdvertiseAddress
		st.Labels, st.Overlay = old.Labels, old.Overlay
		// The same cluster.kat, with the ports the old node last ran on.
		st.Cluster = old.Cluster
	}
	if o.NodeName != "" {
		st.NodeName = o.NodeName
	}
	if o.AdvertiseAddress != "" {
		st.AdvertiseAddress = o.AdvertiseAddress
	}
	if o.EtcdPeerPort != 0 {
		st.Cluster.Spec.EtcdPeerPort = o.EtcdPeerPort
	}
	return st
}

// prepareEmptyDir makes sure dir exists and is empty, creating it when
// missing (created is then true).
func prepareEmptyDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("--data-dir: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("--data-dir: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("--data-dir: %s exists and is not empty: restore into a new directory", dir)
	}
	return false, nil
}

// clearDir undoes a failed restore: it removes dir when the restore created
// it, else what the restore put in it.
func clearDir(dir string, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
}

// copyPrivate copies the file src to dst, readable by its owner only.
func copyPrivate(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := pki.WriteFileAtomic(dst, b, 0o600); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}

// takeOverTokens makes this data directory's admin and join tokens the
// cluster's, on the first start after a restore without the old
// credentials (nodeState.ResetTokens).
func (n *Node) takeOverTokens(ctx context.Context) error {
	if err := n.repo.ReplaceTokens(ctx, n.admin, n.join); err != nil {
		return fmt.Errorf("restored cluster: %w", err)
	}
	n.state.ResetTokens = false
	if err := saveNodeState(n.dir, n.state); err != nil {
		return err
	}
	n.log.Warn().Str("katcall_config", n.dir.katcallConfig()).Str("join_token", n.dir.joinToken()).
		Msg("restored cluster: new CA, admin token and join token; the old ones no longer work")
	return nil
}
