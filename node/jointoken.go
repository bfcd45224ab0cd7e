package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// ensureJoinToken returns the join secret and makes sure the token file
// holds the whole token (secret and CA fingerprint), as `kat-agent join
// --token-file` reads it. A file from before tokens carried the fingerprint
// (the bare secret) is rewritten.
func ensureJoinToken(path string, ca *pki.CA) (string, error) {
	held, err := ensureToken(path)
	if err != nil {
		return "", err
	}
	secret := held
	if tok, err := pki.ParseJoinToken(held); err == nil {
		secret = tok.Secret
	}
	want := pki.JoinToken{Secret: secret, CAFingerprint: pki.Fingerprint(ca.Cert)}.String()
	if held == want {
		return secret, nil
	}
	if err := pki.WriteFileAtomic(path, []byte(want+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write join token: %w", err)
	}
	return secret, nil
}

// rotateJoinToken issues a new join secret with the cluster CA's
// fingerprint (apiserver.Config.RotateJoinToken): it rewrites
// DATA_DIR/join.token, then stores the secret's hash, from which moment only
// the new token admits nodes. When the hash cannot be stored, the old file
// is put back and the old token stays valid.
func (n *Node) rotateJoinToken(ctx context.Context) (string, error) {
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	secret, err := newSecret()
	if err != nil {
		return "", err
	}
	tok := pki.JoinToken{Secret: secret, CAFingerprint: pki.Fingerprint(n.ca.Cert)}.String()
	path := n.dir.joinToken()
	old, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the current join token: %w", err)
	}
	if err := pki.WriteFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the new join token: %w", err)
	}
	// Sealed with the CA key, so that whichever member leads later can
	// bring its DATA_DIR/join.token up to date (syncJoinToken).
	sealed, err := n.ca.Seal(joinTokenSealPurpose, []byte(tok))
	if err != nil {
		return "", err
	}
	if err := n.repo.SetJoinToken(ctx, secret, sealed); err != nil {
		if rerr := pki.WriteFileAtomic(path, old, 0o600); rerr != nil {
			return "", fmt.Errorf("%w (and putting back %s failed: %w)", err, path, rerr)
		}
		return "", err
	}
	n.log.Info().Str("token_file", path).Msg("join token rotated")
	return tok, nil
}

// joinTokenSealPurpose names the join token's sealed copy in etcd.
const joinTokenSealPurpose = "join token"

// syncJoinToken rewrites DATA_DIR/join.token with the join token the last
// rotation sealed in etcd when the file holds another (the token was
// rotated while another member led), so that the file of the node that
// leads is always the token that admits nodes. Without a sealed copy (no
// rotation since init, whose token every member received as it joined) it
// does nothing.
func (n *Node) syncJoinToken(ctx context.Context) error {
	sealed, hash, err := n.repo.SealedJoinToken(ctx)
	if errors.Is(err, resources.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the join token rotated last: %w", err)
	}
	plain, err := n.ca.Open(joinTokenSealPurpose, sealed)
	if err != nil {
		return fmt.Errorf("read the join token rotated last: %w", err)
	}
	tok, err := pki.ParseJoinToken(string(plain))
	if err != nil {
		return fmt.Errorf("read the join token rotated last: %w", err)
	}
	if !resources.TokenMatches(hash, tok.Secret) {
		return errors.New("the join token rotated last does not match the stored hash: keeping DATA_DIR/join.token")
	}
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	path := n.dir.joinToken()
	if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == tok.String() {
		return nil
	}
	if err := pki.WriteFileAtomic(path, []byte(tok.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the join token rotated last: %w", err)
	}
	n.log.Info().Str("token_file", path).Msg("join token file brought up to date: the token was rotated while another member led")
	return nil
}
