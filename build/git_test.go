package build

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
)

// TestCheckout fetches exact commits over smart HTTP, shallow when the
// server allows it and in full otherwise, and checks the tree on disk.
func TestCheckout(t *testing.T) {
	for _, allowSHA := range []bool{true, false} {
		t.Run(map[bool]string{true: "by hash", false: "full fetch"}[allowSHA], func(t *testing.T) {
			repo := newAppRepo(t, appRepoOptions{allowSHA: allowSHA})
			first := repo.Commit("v1", map[string]string{"app/index.html": "v1\n", "app/link": "->index.html"})
			repo.Commit("v2", map[string]string{"app/index.html": "v2\n", "app/new.txt": "new\n"})
			dir := t.TempDir()
			var log bytes.Buffer
			shallow, err := checkout(context.Background(), repo.url, first, "", Auth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &log)
			if err != nil {
				t.Fatalf("%v\n%s", err, log.String())
			}
			if shallow != allowSHA {
				t.Errorf("shallow=%t, want %t", shallow, allowSHA)
			}
			src := filepath.Join(dir, "src")
			if b, _ := os.ReadFile(filepath.Join(src, "app", "index.html")); string(b) != "v1\n" {
				t.Errorf("index.html = %q, want the first commit's", b)
			}
			if target, err := os.Readlink(filepath.Join(src, "app", "link")); err != nil || target != "index.html" {
				t.Errorf("symlink: %q, %v", target, err)
			}
			for _, absent := range []string{".git", "app/new.txt"} {
				if _, err := os.Lstat(filepath.Join(src, absent)); err == nil {
					t.Errorf("%s is in the checkout", absent)
				}
			}
		})
	}
	t.Run("unknown commit", func(t *testing.T) {
		repo := newAppRepo(t, appRepoOptions{allowSHA: false})
		repo.Commit("v1", map[string]string{"a": "a\n"})
		dir := t.TempDir()
		_, err := checkout(context.Background(), repo.url, strings.Repeat("e", 40), "refs/heads/main", Auth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &bytes.Buffer{})
		if !errors.Is(err, errCommitNotFound) {
			t.Errorf("err %v, want errCommitNotFound", err)
		}
	})
	// With the branch it was resolved from, the commit comes at depth 1
	// even from a server that serves no commit by hash; once the branch
	// moved on, the fetch falls back and still finds it.
	t.Run("by branch", func(t *testing.T) {
		repo := newAppRepo(t, appRepoOptions{allowSHA: false})
		first := repo.Commit("v1", map[string]string{"index.html": "v1\n"})
		dir := t.TempDir()
		var log bytes.Buffer
		shallow, err := checkout(context.Background(), repo.url, first, "refs/heads/main", Auth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &log)
		if err != nil || !shallow || strings.Contains(log.String(), "every branch") {
			t.Fatalf("checkout by branch: shallow=%t, %v\n%s", shallow, err, log.String())
		}
		repo.Commit("v2", map[string]string{"index.html": "v2\n"})
		dir = t.TempDir()
		log.Reset()
		_, err = checkout(context.Background(), repo.url, first, "refs/heads/main", Auth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &log)
		if b, _ := os.ReadFile(filepath.Join(dir, "src", "index.html")); err != nil || string(b) != "v1\n" {
			t.Fatalf("checkout after the branch moved: %q, %v\n%s", b, err, log.String())
		}
		if !strings.Contains(log.String(), "moved on") {
			t.Errorf("log does not say the branch moved on:\n%s", log.String())
		}
	})
}

func TestSSHAuth(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile, hosts := filepath.Join(dir, "id"), filepath.Join(dir, "known_hosts")
	writeFile(t, keyFile, string(pem.EncodeToMemory(block)))
	writeFile(t, hosts, "")
	m, err := Auth{SSHKeyFile: keyFile, KnownHostsFile: hosts, Username: "deploy"}.method()
	if err != nil {
		t.Fatal(err)
	}
	pk, ok := m.(*gitssh.PublicKeys)
	if !ok || pk.User != "deploy" || pk.HostKeyCallback == nil {
		t.Errorf("method %#v: want public keys for deploy with a host key check", m)
	}
}
