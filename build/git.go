package build

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Auth names the credential files of an app repository, the same shape as
// a config-repo source's auth. The files are read at every build, so a
// rotated secret is picked up; their content never reaches an error or a
// log. At most one of TokenFile, BasicAuthFile and SSHKeyFile is set.
type Auth struct {
	// TokenFile holds a token (first line) sent as the HTTP basic
	// password with Username (default "x-access-token") as the user.
	TokenFile string
	// Username is the HTTP user sent with TokenFile, or the SSH user
	// (default "git").
	Username string
	// BasicAuthFile holds "user:password" on its first line.
	BasicAuthFile string
	// SSHKeyFile is an unencrypted PEM private key for ssh:// and scp-like
	// URLs.
	SSHKeyFile string
	// KnownHostsFile is the known_hosts file SSH host keys are checked
	// against; required with SSHKeyFile.
	KnownHostsFile string
}

// method turns the credential files into a go-git auth method; nil means
// anonymous.
func (a Auth) method() (transport.AuthMethod, error) {
	n := 0
	for _, f := range []string{a.TokenFile, a.BasicAuthFile, a.SSHKeyFile} {
		if f != "" {
			n++
		}
	}
	if n > 1 {
		return nil, fmt.Errorf("%w: auth: tokenFile, basicAuthFile and sshKeyFile are exclusive", ErrInvalid)
	}
	switch {
	case a.TokenFile != "":
		tok, err := firstLine("auth.tokenFile", a.TokenFile)
		if err != nil {
			return nil, err
		}
		user := a.Username
		if user == "" {
			user = "x-access-token"
		}
		return &githttp.BasicAuth{Username: user, Password: tok}, nil
	case a.BasicAuthFile != "":
		line, err := firstLine("auth.basicAuthFile", a.BasicAuthFile)
		if err != nil {
			return nil, err
		}
		user, pw, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("%w: auth.basicAuthFile %s: want \"user:password\" on its first line", ErrInvalid, a.BasicAuthFile)
		}
		return &githttp.BasicAuth{Username: user, Password: pw}, nil
	case a.SSHKeyFile != "":
		if a.KnownHostsFile == "" {
			return nil, fmt.Errorf("%w: auth.knownHostsFile: is required with auth.sshKeyFile", ErrInvalid)
		}
		user := a.Username
		if user == "" {
			user = "git"
		}
		pem, err := os.ReadFile(a.SSHKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read auth.sshKeyFile: %w", err)
		}
		keys, err := gitssh.NewPublicKeys(user, pem, "")
		if err != nil {
			return nil, fmt.Errorf("%w: auth.sshKeyFile %s: not a usable unencrypted private key", ErrInvalid, a.SSHKeyFile)
		}
		cb, err := gitssh.NewKnownHostsCallback(a.KnownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("read auth.knownHostsFile %s: %w", a.KnownHostsFile, err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, nil
}

func firstLine(field, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", field, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) == "" {
		return "", fmt.Errorf("%w: %s %s is empty", ErrInvalid, field, file)
	}
	return strings.TrimSpace(sc.Text()), nil
}

// RedactURL removes user information (a user name and password or token)
// from a URL, for errors and logs. Other strings are returned unchanged.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// redactor replaces every credential-bearing form of a URL in messages.
type redactor struct{ old []string }

func newRedactor(rawURL string) redactor {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return redactor{}
	}
	r := redactor{old: []string{rawURL, RedactURL(rawURL)}}
	if p, ok := u.User.Password(); ok && p != "" {
		r.old = append(r.old, p, "***")
		if e := url.PathEscape(p); e != p {
			r.old = append(r.old, e, "***")
		}
	}
	return r
}

func (r redactor) String(s string) string {
	if len(r.old) == 0 {
		return s
	}
	return strings.NewReplacer(r.old...).Replace(s)
}

// redactedError keeps the chain of err (errors.Is still works) and hides
// credentials in its message.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func (r redactor) Error(err error) error {
	if err == nil || len(r.old) == 0 {
		return err
	}
	return &redactedError{msg: r.String(err.Error()), err: err}
}

var errCommitNotFound = errors.New("commit not found in the repository")

// checkout puts the tree of commit into srcDir, with the repository's
// objects in gitDir (outside srcDir, so .git is not part of the build
// context). It fetches the commit alone with depth 1 when the server allows
// fetching by hash, else every branch and tag in full. shallow tells which.
func checkout(ctx context.Context, repoURL, commit string, auth Auth, gitDir, srcDir string, log io.Writer) (shallow bool, err error) {
	red := newRedactor(repoURL)
	method, err := auth.method()
	if err != nil {
		return false, err
	}
	st := filesystem.NewStorageWithOptions(osfs.New(gitDir), cache.NewObjectLRUDefault(), filesystem.Options{ExclusiveAccess: true})
	defer st.Close()
	repo, err := git.Init(st, osfs.New(srcDir))
	if err != nil {
		return false, fmt.Errorf("init repository: %w", err)
	}
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{repoURL}}); err != nil {
		return false, red.Error(fmt.Errorf("add remote: %w", err))
	}
	fmt.Fprintf(log, "fetching commit %s from %s\n", commit, RedactURL(repoURL))
	err = repo.FetchContext(ctx, &git.FetchOptions{
		RemoteName: "origin",
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + commit + ":refs/kat/build")},
		Depth:      1, Tags: git.NoTags, Auth: method,
	})
	shallow = err == nil
	if errors.Is(err, git.ErrExactSHA1NotSupported) {
		fmt.Fprintf(log, "the server does not serve a commit by hash: fetching every branch and tag\n")
		err = repo.FetchContext(ctx, &git.FetchOptions{
			RemoteName: "origin",
			RefSpecs: []config.RefSpec{
				"+refs/heads/*:refs/remotes/origin/*",
				"+refs/tags/*:refs/tags/*",
			},
			Tags: git.NoTags, Auth: method,
		})
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return shallow, red.Error(fmt.Errorf("fetch %s from %s: %w", short(commit), RedactURL(repoURL), err))
	}
	h := plumbing.NewHash(commit)
	if _, err := repo.CommitObject(h); err != nil {
		return shallow, red.Error(fmt.Errorf("%s in %s: %w", commit, RedactURL(repoURL), errCommitNotFound))
	}
	wt, err := repo.Worktree()
	if err != nil {
		return shallow, fmt.Errorf("open worktree: %w", err)
	}
	if err := wt.Checkout(&git.CheckoutOptions{Hash: h, Force: true}); err != nil {
		return shallow, fmt.Errorf("check out %s: %w", short(commit), err)
	}
	// go-git left a ".git" file pointing at gitDir: keep it out of the
	// build context.
	if err := os.Remove(filepath.Join(srcDir, ".git")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return shallow, fmt.Errorf("remove .git link from the checkout: %w", err)
	}
	fmt.Fprintf(log, "checked out %s (shallow=%t)\n", commit, shallow)
	return shallow, nil
}
