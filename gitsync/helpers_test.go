package gitsync

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx/gittest"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// testRemote is a config repository (gittest) with a working clone that
// commits to it with the git CLI.
type testRemote struct{ *gittest.Repo }

func newTestRemote(t testing.TB) *testRemote {
	t.Helper()
	return &testRemote{gittest.NewRepo(t, "config")}
}

func (r *testRemote) workload(dir, ns, name string, replicas int) {
	r.WriteFile(dir+"/workload.kat", workloadYAML(ns, name, replicas))
}

// newGitServer serves the remote over Git smart HTTP and returns the
// server and the repository's URL.
func newGitServer(t testing.TB, r *testRemote) (*gittest.Server, string) {
	t.Helper()
	s := gittest.Serve(t, r.Repo, gittest.ServerOptions{})
	return s, s.RepoURL
}

// env is a store, a repo with the default namespace and a running Manager.
type env struct {
	t       testing.TB
	repo    *resources.Repo
	m       *Manager
	dataDir string
	stop    func()
	// ca holds the cluster's keys: secret files are encrypted to its age
	// recipient.
	ca *pki.CA
}

func newEnv(t testing.TB) *env {
	t.Helper()
	st := storetest.New(t)
	repo := resources.New(st)
	if _, err := repo.EnsureNamespace(context.Background(), resources.NamespaceDefault, nil); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("gitsync-test")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, repo: repo, dataDir: t.TempDir(), ca: ca}
	e.start()
	t.Cleanup(func() { e.stop() })
	return e
}

// start runs a new Manager over the same store and data directory.
func (e *env) start() {
	id, err := e.ca.AgeIdentity()
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = NewManager(Config{Repo: e.repo, DataDir: e.dataDir, Logger: zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel),
		Secrets: &SecretKeys{Identity: id, Sealer: e.ca, KeyID: "test"}})
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

func (e *env) addSource(spec api.SourceSpec) {
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
	polltest.UntilErr(e.t, 60*time.Second, what, func() error {
		if last := cond(); last != "" {
			_, _ = e.m.Trigger("")
			return errors.New(last)
		}
		return nil
	})
}

func (e *env) source(name string) api.Source {
	e.t.Helper()
	s, err := e.repo.GetSource(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return *s
}

// waitApplied waits until the source has applied commit.
func (e *env) waitApplied(name, commit string) api.SourceStatus {
	e.t.Helper()
	e.eventually("source "+name+" applies "+api.ShortCommit(commit), func() string {
		st := e.source(name).Status
		if st.AppliedCommit != commit {
			return fmt.Sprintf("applied %q (last error %q)", api.ShortCommit(st.AppliedCommit), st.LastError)
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
		out[w.Namespace+"/"+w.Name] = w.Generation
	}
	return out
}
