package resources

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
)

// ClusterInfo is what init records about the cluster, once: its identity
// and its configuration (Name is Config.Metadata.Name).
type ClusterInfo struct {
	api.ClusterIdentity
	Config quadlet.ClusterConfiguration `json:"config"`
}

// nameFromConfig fills in Name for a record written before the identity
// held it, when cluster.kat's metadata.name was the only copy.
func (i *ClusterInfo) nameFromConfig() {
	if i.Name == "" {
		i.Name = i.Config.Metadata.Name
	}
}

// ClusterInit is the one-time initialisation of a cluster's records.
type ClusterInit struct {
	UID        string
	Config     quadlet.ClusterConfiguration
	AdminToken string
	JoinToken  string
}

// HashToken returns the hex SHA-256 of a bearer token; only hashes are kept
// in etcd.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// TokenMatches compares a presented token with a stored hash in constant time.
func TokenMatches(hash, token string) bool {
	if hash == "" {
		return false
	}
	got := HashToken(token)
	return subtle.ConstantTimeCompare([]byte(got), []byte(hash)) == 1
}

// InitCluster writes the cluster's identity, configuration and token hashes
// if no cluster has been initialised in this store yet. It reports whether it
// wrote them; when a cluster exists it returns the stored one untouched.
func (r *Repo) InitCluster(ctx context.Context, in ClusterInit) (*ClusterInfo, bool, error) {
	info := ClusterInfo{
		ClusterIdentity: api.ClusterIdentity{UID: in.UID, Name: in.Config.Metadata.Name, CreatedAt: r.now().UTC()},
		Config:          in.Config,
	}
	cfg, err := putJSON(keyClusterConfig, info)
	if err != nil {
		return nil, false, err
	}
	ops := []store.Op{
		{Type: store.OpPut, Key: keyClusterUID, Value: []byte(in.UID)},
		{Type: store.OpPut, Key: keySchemaVersion, Value: []byte(SchemaVersion)},
		{Type: store.OpPut, Key: keyAdminTokenHash, Value: []byte(HashToken(in.AdminToken))},
		{Type: store.OpPut, Key: keyJoinTokenHash, Value: []byte(HashToken(in.JoinToken))},
		cfg,
	}
	ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: keyClusterUID, ExpectedVersion: 0}}, ops, nil)
	if err != nil {
		return nil, false, fmt.Errorf("initialise cluster: %w", err)
	}
	if ok {
		return &info, true, nil
	}
	stored, err := r.ClusterInfo(ctx)
	if err != nil {
		return nil, false, err
	}
	return stored, false, nil
}

// ClusterInfo returns the recorded cluster identity and configuration.
func (r *Repo) ClusterInfo(ctx context.Context) (*ClusterInfo, error) {
	var info ClusterInfo
	ver, err := r.getJSON(ctx, keyClusterConfig, &info)
	if err != nil {
		return nil, fmt.Errorf("read cluster configuration: %w", err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("cluster configuration: %w: this store was never initialised", ErrNotFound)
	}
	info.nameFromConfig()
	return &info, nil
}

// AdminTokenHash returns the stored hash of the admin bearer token.
func (r *Repo) AdminTokenHash(ctx context.Context) (string, error) {
	return r.getString(ctx, keyAdminTokenHash)
}

// JoinTokenHash returns the stored hash of the join token.
func (r *Repo) JoinTokenHash(ctx context.Context) (string, error) {
	return r.getString(ctx, keyJoinTokenHash)
}

// SetJoinToken replaces the stored hash of the join secret with the hash of
// secret, and the sealed copy of the join token with sealed, in one
// transaction: from then on only secret admits a node, and every etcd
// member can bring its DATA_DIR/join.token up to date from sealed (see
// SealedJoinToken). A nil sealed deletes the sealed copy.
func (r *Repo) SetJoinToken(ctx context.Context, secret string, sealed []byte) error {
	if secret == "" {
		return errors.New("set join token: empty secret")
	}
	ops := []store.Op{{Type: store.OpPut, Key: keyJoinTokenHash, Value: []byte(HashToken(secret))}}
	if sealed != nil {
		ops = append(ops, store.Op{Type: store.OpPut, Key: keyJoinTokenSealed, Value: sealed})
	} else {
		ops = append(ops, store.Op{Type: store.OpDelete, Key: keyJoinTokenSealed})
	}
	if _, err := r.st.DoTransaction(ctx, nil, ops, nil); err != nil {
		return fmt.Errorf("store the join token hash: %w", err)
	}
	return nil
}

// SealedJoinToken returns the join token sealed with the cluster CA's key
// by the last rotation (pki.CA.Seal), and the hash of the join secret it
// was stored with; ErrNotFound when no rotation stored one.
func (r *Repo) SealedJoinToken(ctx context.Context) (sealed []byte, hash string, err error) {
	kv, err := r.st.Get(ctx, keyJoinTokenSealed)
	if err != nil {
		return nil, "", fmt.Errorf("read %s: %w", keyJoinTokenSealed, notFoundAs(err))
	}
	hash, err = r.JoinTokenHash(ctx)
	return kv.Value, hash, err
}

// SetLeaderEndpoint records the current leader's API endpoint.
func (r *Repo) SetLeaderEndpoint(ctx context.Context, ep api.Leader) error {
	b, err := json.Marshal(ep)
	if err != nil {
		return fmt.Errorf("encode leader endpoint: %w", err)
	}
	if err := r.st.Put(ctx, keyLeaderEndpoint, b); err != nil {
		return fmt.Errorf("record leader endpoint: %w", err)
	}
	return nil
}

// SetDetached records that this cluster is a node detached from its own
// (docs/detached.md).
func (r *Repo) SetDetached(ctx context.Context, d api.Detached) error {
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("encode the detached record: %w", err)
	}
	if err := r.st.Put(ctx, keyDetached, b); err != nil {
		return fmt.Errorf("record the detached node: %w", err)
	}
	return nil
}

// GetDetached returns the detached record, nil when the cluster is no
// detached node.
func (r *Repo) GetDetached(ctx context.Context) (*api.Detached, error) {
	var d api.Detached
	ver, err := r.getJSON(ctx, keyDetached, &d)
	if err != nil {
		return nil, fmt.Errorf("read the detached record: %w", err)
	}
	if ver == 0 {
		return nil, nil
	}
	return &d, nil
}

// GetLeaderEndpoint returns the last recorded leader endpoint.
func (r *Repo) GetLeaderEndpoint(ctx context.Context) (*api.Leader, error) {
	var ep api.Leader
	ver, err := r.getJSON(ctx, keyLeaderEndpoint, &ep)
	if err != nil {
		return nil, fmt.Errorf("read leader endpoint: %w", err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("leader endpoint: %w", ErrNotFound)
	}
	return &ep, nil
}

func (r *Repo) getString(ctx context.Context, key string) (string, error) {
	kv, err := r.st.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", key, notFoundAs(err))
	}
	return string(kv.Value), nil
}

// notFoundAs translates the store's not-found error into this package's.
func notFoundAs(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
