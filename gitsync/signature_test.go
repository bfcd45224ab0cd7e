package gitsync

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"

	"kat.dws.rip/kat/api"
)

// newKey makes a PGP key and writes its armored public keyring to a file.
func newKey(t *testing.T, name string) (*openpgp.Entity, string) {
	t.Helper()
	ent, err := openpgp.NewEntity(name, "", name+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ent.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), name+".asc")
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return ent, file
}

// signedCommit commits the working clone with go-git, signed by key (nil:
// unsigned), and pushes with the git CLI.
func (r *testRemote) signedCommit(t *testing.T, msg string, key *openpgp.Entity) string {
	t.Helper()
	repo, err := git.PlainOpen(r.Work)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := repo.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "kat", Email: "kat@example.com", When: time.Now()}
	h, err := wt.Commit(msg, &git.CommitOptions{Author: sig, Committer: sig, SignKey: key, AllowEmptyCommits: true})
	if err != nil {
		t.Fatal(err)
	}
	r.Git(r.Work, "push", "-q", "-f", "origin", "main")
	return h.String()
}

func TestSignatures(t *testing.T) {
	t.Parallel()
	trusted, ring := newKey(t, "trusted")
	stranger, _ := newKey(t, "stranger")
	r := newTestRemote(t)
	r.workload("web", "default", "web", 1)
	c1 := r.signedCommit(t, "signed", trusted)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL(), KeyringFile: ring})
	e.waitApplied("config", c1)

	for _, tc := range []struct {
		name string
		key  *openpgp.Entity
		want string
	}{
		{"unsigned", nil, "is not signed"},
		{"signed by an unknown key", stranger, "is not signed by a trusted key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.workload("web", "default", "web", 9)
			bad := r.signedCommit(t, tc.name, tc.key)
			e.eventually("commit refused", func() string {
				st := e.source("config").Status
				c := condition(st.Conditions, CondReady)
				if c == nil || c.Reason != ReasonSignature || !strings.Contains(c.Message, api.ShortCommit(bad)) || !strings.Contains(c.Message, tc.want) {
					return fmt.Sprintf("Ready %+v", c)
				}
				return ""
			})
			if st := e.source("config").Status; st.AppliedCommit != c1 {
				t.Errorf("applied %s, want %s kept", st.AppliedCommit, c1)
			}
			if g := e.generations()["default/web"]; g != 1 {
				t.Errorf("generation %d: a refused commit was applied", g)
			}
		})
	}

	r.workload("web", "default", "web", 2)
	c2 := r.signedCommit(t, "signed again", trusted)
	e.waitApplied("config", c2)
	if g := e.generations()["default/web"]; g != 2 {
		t.Errorf("generation %d after a trusted commit, want 2", g)
	}
}
