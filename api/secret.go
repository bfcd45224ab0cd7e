package api

import "time"

// SecretInfo is what the API and katcall show of a secret: names, keys and
// version; never a value, never the sealed values.
type SecretInfo struct {
	// UID is new on every create: a re-created secret is another secret.
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Version is 1 at create and grows by one whenever keys or values
	// change.
	Version int64 `json:"version"`
	// Keys are the secret's keys, sorted.
	Keys []string `json:"keys"`
	// BinaryKeys are the keys whose value is not text: files only.
	BinaryKeys []string `json:"binaryKeys,omitempty"`
	// Owner is the Git source and file, or the API, that wrote it.
	Owner Owner `json:"owner"`
	// SourceBlob is the Git blob of the file last applied: an unchanged
	// file is not decrypted again.
	SourceBlob string    `json:"sourceBlob,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
	// UsedBy are the workloads of its namespace whose desired spec uses
	// it, sorted; and Error is its Git source's error for its file (the
	// secret keeps its last good version meanwhile). The API fills both
	// when it answers; they are never stored.
	UsedBy []string `json:"usedBy,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// Secret is a secret's record (/kat/secrets/{ns}/{name}): what may be shown
// of it and its values sealed with a key derived from the cluster CA's key.
// Only the leader writes and reads it; no worker may.
type Secret struct {
	SecretInfo
	// Recipient is the age recipient whose stanza opened the file.
	Recipient string `json:"recipient,omitempty"`
	// KeyID is the fingerprint of the CA whose key sealed Sealed.
	KeyID string `json:"keyID"`
	// Sealed is the JSON of the values (key to bytes), sealed for purpose
	// SecretSealPurpose(ns, name).
	Sealed []byte `json:"sealed"`
}

// SecretSealPurpose is the purpose a secret's values are sealed for: a
// sealed value moved to another secret's record does not open.
func SecretSealPurpose(ns, name string) string { return "secret " + ns + "/" + name }

// SecretsRecipient is the cluster's age recipient, what secret files are
// encrypted to (GET /v1alpha1/secrets/recipient).
type SecretsRecipient struct {
	Recipient string `json:"recipient"`
	// KeyID is the fingerprint of the CA the recipient is derived from.
	KeyID string `json:"keyID"`
}

// SecretDelivery is the answer of GET /v1alpha1/nodes/{node}/secrets/{ns}/{name}
// to a node that runs an instance using the secret: the one record that
// carries values.
type SecretDelivery struct {
	Namespace string            `json:"namespace"`
	Name      string            `json:"name"`
	UID       string            `json:"uid"`
	Version   int64             `json:"version"`
	Values    map[string][]byte `json:"values"`
}

// SecretRef is /kat/secretrefs/{node}/{ns}/{name}: a secret that an
// instance assigned to node uses, and its current version (never a
// value). The leader writes it; the node watches its own, so it fetches a
// new version of the files it mounts as soon as there is one.
type SecretRef struct {
	Node      string `json:"node"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Version   int64  `json:"version"`
}
