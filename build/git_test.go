package build

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
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
			shallow, err := checkout(context.Background(), repo.url, first, "", api.GitAuth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &log)
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
		_, err := checkout(context.Background(), repo.url, strings.Repeat("e", 40), "refs/heads/main", api.GitAuth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &bytes.Buffer{})
		if !errors.Is(err, gitx.ErrCommitNotFound) {
			t.Errorf("err %v, want gitx.ErrCommitNotFound", err)
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
		shallow, err := checkout(context.Background(), repo.url, first, "refs/heads/main", api.GitAuth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &log)
		if err != nil || !shallow || strings.Contains(log.String(), "every branch") {
			t.Fatalf("checkout by branch: shallow=%t, %v\n%s", shallow, err, log.String())
		}
		repo.Commit("v2", map[string]string{"index.html": "v2\n"})
		dir = t.TempDir()
		log.Reset()
		_, err = checkout(context.Background(), repo.url, first, "refs/heads/main", api.GitAuth{}, filepath.Join(dir, "git"), filepath.Join(dir, "src"), &log)
		if b, _ := os.ReadFile(filepath.Join(dir, "src", "index.html")); err != nil || string(b) != "v1\n" {
			t.Fatalf("checkout after the branch moved: %q, %v\n%s", b, err, log.String())
		}
		if !strings.Contains(log.String(), "moved on") {
			t.Errorf("log does not say the branch moved on:\n%s", log.String())
		}
	})
}

// TestCheckoutCredentials: credentials retrying cannot fix stall the build
// (ErrInvalid), a credential file still missing does not, and no error
// holds a password.
func TestCheckoutCredentials(t *testing.T) {
	repo := newAppRepo(t, appRepoOptions{user: "builder", password: "s3cret"})
	commit := repo.Commit("v1", map[string]string{"a": "a\n"})
	dir := t.TempDir()
	noColon := filepath.Join(dir, "basic")
	writeFile(t, noColon, "s3cret\n")
	for _, tc := range []struct {
		name     string
		url      string
		auth     api.GitAuth
		invalid  bool
		notExist bool
	}{
		{name: "malformed basic auth file", url: repo.url, auth: api.GitAuth{BasicAuthFile: noColon}, invalid: true},
		{name: "ssh key for an http URL", url: repo.url, auth: api.GitAuth{SSHKeyFile: noColon, KnownHostsFile: noColon}, invalid: true},
		{name: "missing token file", url: repo.url, auth: api.GitAuth{TokenFile: filepath.Join(dir, "nope")}, notExist: true},
		{name: "wrong password in the URL", url: strings.Replace(repo.url, "http://", "http://builder:wrong-s3cret@", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, ref := range []string{"", "refs/heads/main"} {
				d := t.TempDir()
				var log bytes.Buffer
				_, err := checkout(context.Background(), tc.url, commit, ref, tc.auth, filepath.Join(d, "git"), filepath.Join(d, "src"), &log)
				if err == nil || errors.Is(err, ErrInvalid) != tc.invalid || errors.Is(err, fs.ErrNotExist) != tc.notExist {
					t.Fatalf("ref %q: err %v; want one with ErrInvalid %t, fs.ErrNotExist %t", ref, err, tc.invalid, tc.notExist)
				}
				if strings.Contains(err.Error(), "s3cret") || strings.Contains(log.String(), "s3cret") {
					t.Errorf("ref %q: the password leaked: %v\n%s", ref, err, log.String())
				}
			}
		})
	}
}
