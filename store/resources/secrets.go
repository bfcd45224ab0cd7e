package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
)

// Key prefix of the secrets (docs/architecture.md "etcd keys").
const prefixSecrets = "/kat/secrets/"

// SecretKey is where a secret's record lives.
func SecretKey(ns, name string) string { return prefixSecrets + ns + "/" + name }

// SecretsPrefix is the prefix of every secret, or of one namespace's when
// ns is not empty.
func SecretsPrefix(ns string) string {
	if ns == "" {
		return prefixSecrets
	}
	return prefixSecrets + ns + "/"
}

// Sealer seals and opens values with the cluster CA's key (*pki.CA).
type Sealer interface {
	Seal(purpose string, plaintext []byte) ([]byte, error)
	Open(purpose string, sealed []byte) ([]byte, error)
}

// SecretApply is one secret to write.
type SecretApply struct {
	Secret *quadlet.Secret
	Owner  api.Owner
	// SourceBlob and Recipient say which Git file, opened by which
	// recipient, it came from.
	SourceBlob, Recipient string
	// KeyID names the CA key the sealer seals with.
	KeyID string
}

// SecretOwnershipError is returned when the API writes a secret a Git
// source manages. It matches ErrConflict.
type SecretOwnershipError struct {
	Namespace, Name string
	Owner           api.Owner
}

func (e *SecretOwnershipError) Error() string {
	return fmt.Sprintf("secret %s/%s is managed by %s: change it there", e.Namespace, e.Name, e.Owner)
}

// Is makes a SecretOwnershipError match ErrConflict.
func (e *SecretOwnershipError) Is(target error) bool { return target == ErrConflict }

// ApplySecret writes a secret, sealed. The version grows only when keys or
// values changed: a file re-encrypted with the same values (sops rotate)
// keeps it. Git takes over an API-owned secret; the API may not write a
// Git-owned one (SecretOwnershipError). The namespace must exist
// (ErrNotFound). It reports whether the version changed.
func (r *Repo) ApplySecret(ctx context.Context, in SecretApply, sealer Sealer) (*api.Secret, bool, error) {
	ns, name := in.Secret.Namespace(), in.Secret.Name()
	if _, err := r.GetNamespace(ctx, ns); err != nil {
		return nil, false, fmt.Errorf("apply secret %s/%s: %w", ns, name, err)
	}
	purpose := api.SecretSealPurpose(ns, name)
	plain, err := sealValues(in.Secret.Values)
	if err != nil {
		return nil, false, err
	}
	changed := false
	rec, err := updateJSON(ctx, r, SecretKey(ns, name), func(s *api.Secret, ver int64) error {
		if ver != 0 && s.Owner.Kind == api.OwnerGit && in.Owner.Kind != api.OwnerGit {
			return &SecretOwnershipError{Namespace: ns, Name: name, Owner: s.Owner}
		}
		now := r.now().UTC()
		same := false
		if ver != 0 {
			old, err := openValues(sealer, purpose, s.Sealed)
			// A record that no longer opens (another CA) is replaced.
			same = err == nil && valuesEqual(old, in.Secret.Values)
		} else {
			*s = api.Secret{SecretInfo: api.SecretInfo{UID: r.newUID(), Namespace: ns, Name: name, CreatedAt: now}}
		}
		changed = !same
		if changed {
			sealed, err := sealer.Seal(purpose, plain)
			if err != nil {
				return fmt.Errorf("apply secret %s/%s: %w", ns, name, err)
			}
			s.Version++
			s.Sealed, s.KeyID, s.UpdatedAt = sealed, in.KeyID, now
			s.Keys, s.BinaryKeys = in.Secret.Keys(), in.Secret.BinaryKeys()
		}
		s.Owner, s.SourceBlob, s.Recipient = in.Owner, in.SourceBlob, in.Recipient
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return rec, changed, nil
}

// sealValues is the plaintext a secret's values are sealed as.
func sealValues(values map[string]quadlet.SecretValue) ([]byte, error) {
	raw := make(map[string][]byte, len(values))
	for k, v := range values {
		raw[k] = v.Reveal()
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("encode secret values: %w", err)
	}
	return b, nil
}

func openValues(sealer Sealer, purpose string, sealed []byte) (map[string]quadlet.SecretValue, error) {
	plain, err := sealer.Open(purpose, sealed)
	if err != nil {
		return nil, err
	}
	var raw map[string][]byte
	if err := json.Unmarshal(plain, &raw); err != nil {
		return nil, fmt.Errorf("open %s: decode the values: %w", purpose, err)
	}
	out := make(map[string]quadlet.SecretValue, len(raw))
	for k, v := range raw {
		out[k] = quadlet.NewSecretValue(v)
	}
	return out, nil
}

func valuesEqual(a, b map[string]quadlet.SecretValue) bool {
	return maps.EqualFunc(a, b, func(x, y quadlet.SecretValue) bool { return bytes.Equal(x.Reveal(), y.Reveal()) })
}

// GetSecret returns a secret's record (its values sealed).
func (r *Repo) GetSecret(ctx context.Context, ns, name string) (*api.Secret, error) {
	var s api.Secret
	ver, err := r.getJSON(ctx, SecretKey(ns, name), &s)
	if err != nil {
		return nil, fmt.Errorf("get secret %s/%s: %w", ns, name, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("secret %s/%s: %w", ns, name, ErrNotFound)
	}
	return &s, nil
}

// OpenSecret returns a secret's record and its values, opened with sealer.
func (r *Repo) OpenSecret(ctx context.Context, ns, name string, sealer Sealer) (*api.Secret, map[string]quadlet.SecretValue, error) {
	s, err := r.GetSecret(ctx, ns, name)
	if err != nil {
		return nil, nil, err
	}
	values, err := openValues(sealer, api.SecretSealPurpose(ns, name), s.Sealed)
	if err != nil {
		return nil, nil, fmt.Errorf("secret %s/%s: %w", ns, name, err)
	}
	return s, values, nil
}

// ListSecrets returns what may be shown of the secrets of ns (every
// namespace when empty), sorted by namespace and name.
func (r *Repo) ListSecrets(ctx context.Context, ns string) ([]api.SecretInfo, error) {
	kvs, err := r.st.List(ctx, SecretsPrefix(ns))
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	out := make([]api.SecretInfo, 0, len(kvs))
	for _, kv := range kvs {
		var s api.Secret
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, s.SecretInfo)
	}
	slices.SortFunc(out, func(a, b api.SecretInfo) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// DeleteSecret deletes a secret. A Git-owned secret is deleted only by its
// source (owner.Kind git); the API gets a SecretOwnershipError.
func (r *Repo) DeleteSecret(ctx context.Context, ns, name string, by api.Owner) error {
	kv, err := r.st.Get(ctx, SecretKey(ns, name))
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("secret %s/%s: %w", ns, name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", ns, name, err)
	}
	var s api.Secret
	if err := json.Unmarshal(kv.Value, &s); err != nil {
		return fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	if s.Owner.Kind == api.OwnerGit && (by.Kind != api.OwnerGit || by.Source != s.Owner.Source) {
		return &SecretOwnershipError{Namespace: ns, Name: name, Owner: s.Owner}
	}
	ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: kv.Key, ExpectedVersion: kv.Version}},
		[]store.Op{{Type: store.OpDelete, Key: kv.Key}}, nil)
	if err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", ns, name, err)
	}
	if !ok {
		return fmt.Errorf("delete secret %s/%s: %w: it changed while being deleted, try again", ns, name, ErrConflict)
	}
	return nil
}

// SecretUsers returns, by secret ("ns/name"), the workloads of its
// namespace (of ns only, when not empty) whose desired spec uses it,
// sorted by name. uses gives the secrets a spec uses; files loads a
// workload's Quadlet files, for uses to parse when it has not seen the
// spec hash before.
func (r *Repo) SecretUsers(ctx context.Context, ns string, uses func(ns, specHash string, files func() (map[string][]byte, error)) ([]string, error)) (map[string][]string, error) {
	metas, err := r.ListWorkloadMetas(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, m := range metas {
		if ns != "" && m.Namespace != ns {
			continue
		}
		names, err := uses(m.Namespace, m.SpecHash, func() (map[string][]byte, error) {
			files := make(map[string][]byte, len(m.Files))
			for _, f := range m.Files {
				b, err := r.GetManifest(ctx, m.Namespace, m.Name, f)
				if err != nil {
					return nil, err
				}
				files[f] = b
			}
			return files, nil
		})
		if err != nil {
			return nil, fmt.Errorf("secrets used by %s/%s: %w", m.Namespace, m.Name, err)
		}
		for _, n := range names {
			out[m.Namespace+"/"+n] = append(out[m.Namespace+"/"+n], m.Name)
		}
	}
	for _, ws := range out {
		slices.Sort(ws)
	}
	return out, nil
}
