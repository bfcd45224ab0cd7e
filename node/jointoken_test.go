package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// TestRotateJoinToken: katcall token rotate's call issues a token with a
// new secret and the same CA fingerprint and writes it to join.token; from
// then on a join with the old token gets 403 and writes nothing, and a join
// with the new one succeeds.
func TestRotateJoinToken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	leader, lo := runLeader(t, t.TempDir())
	tokenFile := filepath.Join(lo.DataDir, "join.token")
	oldText := readFile(t, tokenFile)
	old, err := pki.ParseJoinToken(string(oldText))
	if err != nil {
		t.Fatal(err)
	}
	admin := katcallClient(t, leader.KatcallConfigPath())
	printed, err := admin.RotateJoinToken(ctx)
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	tok, err := pki.ParseJoinToken(printed)
	if err != nil {
		t.Fatalf("the rotated token %q: %v", printed, err)
	}
	if tok.Secret == old.Secret || tok.CAFingerprint != old.CAFingerprint {
		t.Fatalf("rotated token %s, was %s: want a new secret and the same CA", printed, old)
	}
	if got := strings.TrimSpace(string(readFile(t, tokenFile))); got != printed {
		t.Fatalf("join.token holds %q after rotation, want %q", got, printed)
	}

	oldFile := filepath.Join(t.TempDir(), "old.token")
	must(t, os.WriteFile(oldFile, oldText, 0o600))
	_, err = Open(ctx, workerOptions(t, t.TempDir(), "w1", lo, oldFile), zerolog.Nop())
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 {
		t.Fatalf("join with the token from before the rotation: %v, want 403", err)
	}
	if _, err := leader.repo.GetNodeRegistration(ctx, "w1"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("a join with the old token registered w1: %v", err)
	}
	w, err := Open(ctx, workerOptions(t, t.TempDir(), "w1", lo, tokenFile), zerolog.Nop())
	if err != nil {
		t.Fatalf("join with the rotated token: %v", err)
	}
	w.Close()
	if _, err := leader.repo.GetNodeRegistration(ctx, "w1"); err != nil {
		t.Fatalf("w1 joined with the new token but is not registered: %v", err)
	}

	// etcd holds the rotated token sealed with the CA key, never in the
	// clear; a member that did not lead then (its file is the old token)
	// brings its file up to date when it leads.
	sealed, _, err := leader.repo.SealedJoinToken(ctx)
	must(t, err)
	if strings.Contains(string(sealed), tok.Secret) {
		t.Error("etcd holds the rotated join secret in the clear")
	}
	must(t, os.WriteFile(tokenFile, oldText, 0o600))
	must(t, leader.syncJoinToken(ctx))
	if got := strings.TrimSpace(string(readFile(t, tokenFile))); got != printed {
		t.Errorf("join.token after a term's start: %q, want the rotated %q", got, printed)
	}
	// Tokens replaced (a restore without the old credentials): the sealed
	// copy goes, and a term's start leaves the file alone.
	must(t, leader.repo.ReplaceTokens(ctx, "new-admin", "new-join"))
	if _, _, err := leader.repo.SealedJoinToken(ctx); !errors.Is(err, resources.ErrNotFound) {
		t.Errorf("the sealed join token after the tokens were replaced: %v, want not found", err)
	}
	must(t, leader.syncJoinToken(ctx))
	if got := strings.TrimSpace(string(readFile(t, tokenFile))); got != printed {
		t.Errorf("join.token after the tokens were replaced: %q, want it left alone", got)
	}
}
