package gitsync

import (
	"context"
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
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// testRemote is a bare repository plus a working clone that commits to it
// with the git CLI.
type testRemote struct {
	t    testing.TB
	bare string
	work string
}

func newTestRemote(t testing.TB) *testRemote {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		skipOrFail(t, "git is not installed")
	}
	root := t.TempDir()
	r := &testRemote{t: t, bare: filepath.Join(root, "config.git"), work: filepath.Join(root, "work")}
	r.git(root, "init", "-q", "--bare", "-b", "main", r.bare)
	r.git(root, "init", "-q", "-b", "main", r.work)
	r.git(r.work, "remote", "add", "origin", r.bare)
	return r
}

func (r *testRemote) git(dir string, args ...string) string {
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

func (r *testRemote) write(path string, data []byte) {
	r.t.Helper()
	p := filepath.Join(r.work, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *testRemote) workload(dir, ns, name string, replicas int) {
	r.write(dir+"/workload.kat", workloadYAML(ns, name, replicas))
}

func (r *testRemote) remove(path string) {
	r.t.Helper()
	if err := os.RemoveAll(filepath.Join(r.work, path)); err != nil {
		r.t.Fatal(err)
	}
}

// commit commits everything and pushes; it returns the new head.
func (r *testRemote) commit(msg string) string {
	r.t.Helper()
	r.git(r.work, "add", "-A")
	r.git(r.work, "commit", "-q", "--allow-empty", "-m", msg)
	r.git(r.work, "push", "-q", "-f", "origin", "main")
	return r.git(r.work, "rev-parse", "HEAD")
}

func (r *testRemote) fileURL() string { return "file://" + r.bare }

// gitServer serves the remote's parent directory over Git smart HTTP with
// git http-backend. down makes it drop every connection; bytes counts the
// bodies it received and sent.
type gitServer struct {
	*httptest.Server
	down  atomic.Bool
	bytes atomic.Int64
	reqs  atomic.Int64
}

func newGitServer(t testing.TB, r *testRemote) (*gitServer, string) {
	t.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		skipOrFail(t, "git --exec-path: %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		skipOrFail(t, "git http-backend not found: %v", err)
	}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + filepath.Dir(r.bare), "GIT_HTTP_EXPORT_ALL=1"}}
	s := &gitServer{}
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
		s.reqs.Add(1)
		cw := &countingWriter{ResponseWriter: w}
		cr := &countingReader{ReadCloser: req.Body}
		req.Body = cr
		h.ServeHTTP(cw, req)
		s.bytes.Add(cw.n + cr.n)
	}))
	t.Cleanup(s.Close)
	return s, s.URL + "/" + filepath.Base(r.bare)
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

// env is a store, a repo with the default namespace and a running Manager.
type env struct {
	t       testing.TB
	repo    *resources.Repo
	m       *Manager
	dataDir string
	stop    func()
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st := storetest.New(t)
	repo := resources.New(st)
	if _, err := repo.EnsureNamespace(context.Background(), resources.NamespaceDefault, nil); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, repo: repo, dataDir: t.TempDir()}
	e.start()
	t.Cleanup(func() { e.stop() })
	return e
}

// start runs a new Manager over the same store and data directory.
func (e *env) start() {
	e.m = NewManager(Config{Repo: e.repo, DataDir: e.dataDir, Logger: zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func(m *Manager) { done <- m.Run(ctx) }(e.m)
	e.stop = func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("manager: %v", err)
		}
		e.stop = func() {}
	}
}

func (e *env) addSource(spec resources.SourceSpec) {
	e.t.Helper()
	if spec.Name == "" {
		spec.Name = "config"
	}
	if spec.IntervalSeconds == 0 {
		spec.IntervalSeconds = 3600 // tests trigger syncs themselves
	}
	if _, err := e.repo.PutSourceSpec(context.Background(), Defaulted(spec)); err != nil {
		e.t.Fatal(err)
	}
}

// eventually polls cond until it returns "" or the deadline passes,
// triggering the sources in between.
func (e *env) eventually(what string, cond func() string) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		_, _ = e.m.Trigger("")
		time.Sleep(20 * time.Millisecond) //nolint:forbidigo // a deadline-bounded poll
	}
	e.t.Fatalf("%s: still %s after 60s", what, last)
}

func (e *env) source(name string) resources.Source {
	e.t.Helper()
	s, err := e.repo.GetSource(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return *s
}

// waitApplied waits until the source has applied commit.
func (e *env) waitApplied(name, commit string) resources.SourceStatus {
	e.t.Helper()
	e.eventually("source "+name+" applies "+short(commit), func() string {
		st := e.source(name).Status
		if st.AppliedCommit != commit {
			return fmt.Sprintf("applied %q (last error %q)", short(st.AppliedCommit), st.LastError)
		}
		return ""
	})
	return e.source(name).Status
}

func (e *env) generations() map[string]int64 {
	e.t.Helper()
	ws, err := e.repo.ListWorkloads(context.Background(), "")
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, w := range ws {
		out[w.Meta.Namespace+"/"+w.Meta.Name] = w.Meta.Generation
	}
	return out
}

// skipOrFail skips t for a missing prerequisite, or fails it when
// KAT_REQUIRE_PREREQS is set (task ci sets it after installing them), so a CI
// machine that lost Podman or git goes red instead of silently skipping.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("KAT_REQUIRE_PREREQS") != "" {
		t.Fatalf("prerequisite missing (KAT_REQUIRE_PREREQS is set): "+format, args...)
	}
	t.Skipf(format, args...)
}
