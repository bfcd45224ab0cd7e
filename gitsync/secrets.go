package gitsync

import (
	"context"
	"errors"
	"fmt"
	pathpkg "path"

	"github.com/go-git/go-git/v5/plumbing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// errNoSecretKeys is the error of every secret file where the source has no
// keys to open them.
var errNoSecretKeys = errors.New("this node cannot decrypt secrets (it does not hold the cluster CA key)")

// openSecrets reads, decrypts and parses the secret files at paths. A file
// whose blob is the one its secret was last applied from is skipped: the
// periodic full compare decrypts nothing that did not change.
func (s *source) openSecrets(paths []string, next Listing, current []api.SecretInfo) map[string]ParsedSecret {
	applied := map[string]string{} // path -> blob of this source's secrets
	for _, c := range current {
		if c.Owner.Kind == api.OwnerGit && c.Owner.Source == s.spec.Name {
			applied[c.Owner.Path] = c.SourceBlob
		}
	}
	out := make(map[string]ParsedSecret, len(paths))
	for _, p := range paths {
		blob := next.Secrets[p]
		if applied[p] == blob {
			continue
		}
		out[p] = s.openSecret(p, blob)
	}
	return out
}

func (s *source) openSecret(path, blob string) ParsedSecret {
	ps := ParsedSecret{Blob: blob}
	if s.secrets == nil {
		ps.Err = errNoSecretKeys
		return ps
	}
	data, err := s.git.readBlob(plumbing.NewHash(blob), quadlet.MaxSecretFileBytes)
	if err != nil {
		ps.Err = err
		return ps
	}
	doc, err := sops.Decrypt(data, s.secrets.Identity)
	if err != nil {
		metrics.SecretDecrypted(metrics.SecretViaGit, err)
		ps.Err = err
		return ps
	}
	ps.Recipient = doc.Recipient
	ps.Secret, ps.Err = quadlet.ParseSecret(pathpkg.Base(path), doc.Tree)
	metrics.SecretDecrypted(metrics.SecretViaGit, ps.Err)
	return ps
}

// executeSecrets writes the plan's secrets, sealed, and deletes those whose
// file is gone. A secret whose namespace is missing, or that another owner
// holds, is its file's path error.
func (s *source) executeSecrets(ctx context.Context, commit string, plan Plan, res *applyResult, addErr func(string, error)) error {
	for _, a := range plan.ApplySecrets {
		if s.secrets == nil {
			addErr(a.Path, errNoSecretKeys)
			continue
		}
		rec, changed, err := s.repo.ApplySecret(ctx, resources.SecretApply{
			Secret: a.Secret, SourceBlob: a.Blob, Recipient: a.Recipient, KeyID: s.secrets.KeyID,
			Owner: api.Owner{Kind: api.OwnerGit, Source: s.spec.Name, Path: a.Path, Commit: commit},
		}, s.secrets.Sealer)
		switch {
		case err == nil && changed:
			res.changed = append(res.changed, fmt.Sprintf("secret %s/%s version %d", rec.Namespace, rec.Name, rec.Version))
		case err == nil:
		case errors.Is(err, resources.ErrNotFound):
			addErr(a.Path, fmt.Errorf("namespace %q does not exist: add a %s defining it", a.Secret.Namespace(), quadlet.NamespaceFile))
		case errors.Is(err, resources.ErrConflict):
			addErr(a.Path, err)
		default:
			return err
		}
	}
	for _, d := range plan.DeleteSecrets {
		err := s.repo.DeleteSecret(ctx, d.Namespace, d.Name, api.Owner{Kind: api.OwnerGit, Source: s.spec.Name})
		switch {
		case err == nil:
			res.deleted = append(res.deleted, "secret "+d.String())
		case errors.Is(err, resources.ErrNotFound), errors.Is(err, resources.ErrConflict):
		default:
			return err
		}
	}
	return nil
}
