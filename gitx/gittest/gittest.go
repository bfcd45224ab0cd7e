// Package gittest is test support, imported only by _test.go files: a real
// Git smart-HTTP server for tests (git http-backend behind net/http/cgi and
// httptest) and helpers that make a bare repository with a working clone,
// commit files and push them with the git CLI.
//
// It serves gitx, build, gitsync and the end-to-end tests in scripts/e2e,
// which is why it sits in the gitx layer, below all of them. A test whose
// prerequisite (git, git http-backend) is missing is skipped, or failed when
// KAT_REQUIRE_PREREQS is set (task ci sets it), see SkipOrFail.
//
//	repo := gittest.NewRepo(t, "app")                   // app.git and a clone
//	srv := gittest.Serve(t, repo, gittest.ServerOptions{}) // http://127.0.0.1:port/app.git
//	commit := repo.Commit("first", map[string]string{"Dockerfile": "FROM scratch\n"})
package gittest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"kat.dws.rip/kat/internal/testenv"
)

// SkipOrFail skips t for a missing prerequisite, or fails it when
// KAT_REQUIRE_PREREQS is set: testenv.SkipOrFail.
var SkipOrFail = testenv.SkipOrFail

// Repo is a bare repository NAME.git with branch main, plus a working clone
// that commits and pushes to it with the git CLI. Both live in a temporary
// directory, Root, which Serve serves.
type Repo struct {
	t testing.TB
	// Root holds Bare and Work.
	Root string
	// Bare is the bare repository, Root/NAME.git.
	Bare string
	// Work is the working clone, with Bare as its origin.
	Work string
}

// NewRepo creates Root/NAME.git and its working clone. It skips (or fails,
// see SkipOrFail) when git is not installed.
func NewRepo(t testing.TB, name string) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		SkipOrFail(t, "git is not installed")
	}
	root := t.TempDir()
	r := &Repo{t: t, Root: root, Bare: filepath.Join(root, name+".git"), Work: filepath.Join(root, "work")}
	r.Git(root, "init", "-q", "--bare", "-b", "main", r.Bare)
	r.Git(root, "init", "-q", "-b", "main", r.Work)
	r.Git(r.Work, "remote", "add", "origin", r.Bare)
	return r
}

// Git runs git with args in dir, isolated from the machine's and the
// user's git configuration, and returns its trimmed output; it fails the
// test when git fails.
func (r *Repo) Git(dir string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=kat", "GIT_AUTHOR_EMAIL=kat@example.com",
		"GIT_COMMITTER_NAME=kat", "GIT_COMMITTER_EMAIL=kat@example.com", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// WriteFile writes data to path (relative to Work), creating directories.
func (r *Repo) WriteFile(path string, data []byte) {
	r.t.Helper()
	p := filepath.Join(r.Work, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// Remove removes path (relative to Work) and everything under it.
func (r *Repo) Remove(path string) {
	r.t.Helper()
	if err := os.RemoveAll(filepath.Join(r.Work, path)); err != nil {
		r.t.Fatal(err)
	}
}

// Commit writes files into Work (path relative to Work: content; a content
// "" removes the file, "->target" makes a symbolic link to target), commits
// everything, even nothing, pushes to main and returns the new head.
func (r *Repo) Commit(msg string, files map[string]string) string {
	r.t.Helper()
	for name, content := range files {
		p := filepath.Join(r.Work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		_ = os.Remove(p)
		var err error
		switch {
		case content == "":
		case strings.HasPrefix(content, "->"):
			err = os.Symlink(strings.TrimPrefix(content, "->"), p)
		default:
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			r.t.Fatal(err)
		}
	}
	r.Git(r.Work, "add", "-A")
	r.Git(r.Work, "commit", "-q", "--allow-empty", "-m", msg)
	r.Git(r.Work, "push", "-q", "-f", "origin", "HEAD:main")
	return r.Git(r.Work, "rev-parse", "HEAD")
}

// FileURL is the file:// URL of Bare.
func (r *Repo) FileURL() string { return "file://" + r.Bare }

// ServerOptions tunes a Server.
type ServerOptions struct {
	// AllowSHA lets clients fetch a commit by hash
	// (uploadpack.allowReachableSHA1InWant).
	AllowSHA bool
	// User and Password, when User is set, are required as HTTP basic auth.
	User, Password string
}

// Server serves a Repo over Git smart HTTP with git http-backend, on a free
// loopback port.
type Server struct {
	*httptest.Server
	// RepoURL is the http:// URL of the repository.
	RepoURL string
	down    atomic.Bool
	bytes   atomic.Int64
	reqs    atomic.Int64
}

// SetDown makes the server drop every connection (true) or serve again.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Bytes is how many body bytes the server received and sent.
func (s *Server) Bytes() int64 { return s.bytes.Load() }

// Requests is how many requests reached git http-backend.
func (s *Server) Requests() int64 { return s.reqs.Load() }

// Serve serves r until the test ends. It skips (or fails, see SkipOrFail)
// when git http-backend is not installed.
func Serve(t testing.TB, r *Repo, opts ServerOptions) *Server {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		SkipOrFail(t, "git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		SkipOrFail(t, "git http-backend not found: %v", err)
	}
	r.Git(r.Bare, "config", "uploadpack.allowReachableSHA1InWant", fmt.Sprint(opts.AllowSHA))
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + r.Root, "GIT_HTTP_EXPORT_ALL=1"}}
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.down.Load() {
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					_ = c.Close()
					return
				}
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if opts.User != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != opts.User || p != opts.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		s.reqs.Add(1)
		cw := &countingWriter{ResponseWriter: w}
		cr := &countingReader{ReadCloser: req.Body}
		req.Body = cr
		h.ServeHTTP(cw, req)
		s.bytes.Add(cw.n + cr.n)
	}))
	t.Cleanup(s.Close)
	s.RepoURL = s.URL + "/" + filepath.Base(r.Bare)
	return s
}

type countingReader struct {
	io.ReadCloser
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	c.n += int64(n)
	return n, err
}

type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}
