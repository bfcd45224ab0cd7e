package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"kat.dws.rip/kat/store"
)

// ErrNoCluster is returned by SnapshotClusterInfo for a snapshot that
// holds no KAT cluster.
var ErrNoCluster = errors.New("resources: no KAT cluster in the snapshot")

// SnapshotClusterInfo returns the cluster identity and configuration an
// etcd snapshot file holds (see store.ReadSnapshot), without starting etcd.
func SnapshotClusterInfo(path string) (*ClusterInfo, error) {
	kvs, err := store.ReadSnapshot(path, keyClusterConfig)
	if err != nil {
		return nil, err
	}
	for _, kv := range kvs {
		if kv.Key != keyClusterConfig {
			continue
		}
		var info ClusterInfo
		if err := json.Unmarshal(kv.Value, &info); err != nil {
			return nil, fmt.Errorf("decode %s in the snapshot: %w", keyClusterConfig, err)
		}
		if info.UID == "" {
			return nil, fmt.Errorf("%w: %s has no cluster UID", ErrNoCluster, keyClusterConfig)
		}
		info.nameFromConfig()
		return &info, nil
	}
	return nil, fmt.Errorf("%w (no key %s)", ErrNoCluster, keyClusterConfig)
}

// SnapshotSecrets counts the secrets a snapshot holds: values sealed with
// the CA key of the cluster it was taken of.
func SnapshotSecrets(path string) (int, error) {
	kvs, err := store.ReadSnapshot(path, prefixSecrets)
	if err != nil {
		return 0, err
	}
	return len(kvs), nil
}

// ReplaceTokens makes adminToken and joinSecret the cluster's only admin
// token and join secret, in one transaction: a cluster restored from a
// snapshot without its old credentials gets new ones. The secrets go too:
// sealed with the old CA's key, they would never open again.
func (r *Repo) ReplaceTokens(ctx context.Context, adminToken, joinSecret string) error {
	if adminToken == "" || joinSecret == "" {
		return errors.New("replace tokens: empty token")
	}
	ops := []store.Op{
		{Type: store.OpPut, Key: keyAdminTokenHash, Value: []byte(HashToken(adminToken))},
		{Type: store.OpPut, Key: keyJoinTokenHash, Value: []byte(HashToken(joinSecret))},
		// Sealed with the old CA's key, for the old secret.
		{Type: store.OpDelete, Key: keyJoinTokenSealed},
		{Type: store.OpDeletePrefix, Key: prefixSecrets},
	}
	if _, err := r.st.DoTransaction(ctx, nil, ops, nil); err != nil {
		return fmt.Errorf("replace the admin and join token hashes: %w", err)
	}
	return nil
}
