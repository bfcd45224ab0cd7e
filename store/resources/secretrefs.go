package resources

import (
	"context"
	"encoding/json"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// Key prefix of the secrets each node uses (docs/architecture.md "etcd
// keys"): /kat/secretrefs/{node}/{ns}/{name}.
const prefixSecretRefs = "/kat/secretrefs/"

// SecretRefsPrefix is the prefix of every node's secret references.
func SecretRefsPrefix() string { return prefixSecretRefs }

// NodeSecretRefsPrefix is the prefix of node's secret references, which
// only that node may read (WorkerGrants).
func NodeSecretRefsPrefix(node string) string { return prefixSecretRefs + node + "/" }

// SecretRefKey is where the reference of node to secret ns/name lives.
func SecretRefKey(node, ns, name string) string { return NodeSecretRefsPrefix(node) + ns + "/" + name }

// DecodeSecretRef decodes a secret reference, checking that its key and
// its fields name the same node and secret.
func DecodeSecretRef(kv store.KV) (api.SecretRef, error) {
	var r api.SecretRef
	if err := json.Unmarshal(kv.Value, &r); err != nil {
		return api.SecretRef{}, fmt.Errorf("decode secret reference %s: %w", kv.Key, err)
	}
	if kv.Key != SecretRefKey(r.Node, r.Namespace, r.Name) {
		return api.SecretRef{}, fmt.Errorf("secret reference %s names %s", kv.Key, SecretRefKey(r.Node, r.Namespace, r.Name))
	}
	return r, nil
}

// WriteSecretRefs puts refs and deletes the keys del (under
// SecretRefsPrefix), in batches; it returns the revision of the last.
func (r *Repo) WriteSecretRefs(ctx context.Context, put []api.SecretRef, del []string) (int64, error) {
	return putAndDelete(ctx, r, "secret references", prefixSecretRefs, put, func(ref api.SecretRef) string {
		return SecretRefKey(ref.Node, ref.Namespace, ref.Name)
	}, del)
}
