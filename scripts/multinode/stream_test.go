package multinode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// streamThroughFailover commits a new workload to a config repo and applies
// another with katcall, each every streamEvery, while the leader's kat-agent
// is killed with SIGKILL: once the cluster has settled, the Git workloads
// are exactly those of the repo's HEAD and the applied ones include every
// apply katcall acknowledged, each once, at generation 1 (nothing lost,
// nothing duplicated). It returns the index of the killed host, whose
// kat-agent is not running.
func (c *testCluster) streamThroughFailover(t *testing.T) int {
	t.Helper()
	const (
		streamEvery = 250 * time.Millisecond
		before      = 3 * time.Second // of streaming before the kill
		after       = 8 * time.Second // and after it
	)
	repo := newConfigRepo(t)
	c.katcall(t, "source", "set", "stream", "--repo", "file://"+repo.bare, "--branch", "main", "--interval", "5s")

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed []string // Git workloads, in HEAD once committed
		acked     []string // applies katcall answered 0 to
		failed    []string // and those it did not (may or may not exist)
	)
	wg.Add(2)
	go func() { // the config repo's stream
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("git-%03d", i)
			if err := repo.commitWorkload(name); err != nil {
				t.Errorf("commit %s: %v", name, err)
				return
			}
			mu.Lock()
			committed = append(committed, name)
			mu.Unlock()
			sleepCtx(ctx, streamEvery)
		}
	}()
	dir := t.TempDir()
	go func() { // the applies' stream
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			name := fmt.Sprintf("api-%03d", i)
			wdir := filepath.Join(dir, name)
			err := os.MkdirAll(wdir, 0o755)
			if err == nil {
				err = os.WriteFile(filepath.Join(wdir, "workload.kat"), []byte(streamWorkload(name)), 0o644)
			}
			if err != nil {
				t.Errorf("write %s: %v", name, err)
				return
			}
			// Not ctx: an apply under way when the stream stops
			// ends on its own.
			_, err = c.Katcall(context.Background(), c.bin.Katcall, "apply", "-f", wdir)
			mu.Lock()
			if err == nil {
				acked = append(acked, name)
			} else {
				failed = append(failed, name)
				t.Logf("apply %s not acknowledged: %v", name, err)
			}
			mu.Unlock()
			sleepCtx(ctx, streamEvery)
		}
	}()

	sleepCtx(ctx, before)
	old := c.leaderIndex(t)
	if err := c.agents[old].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the leader %s's kat-agent with streams of commits and applies under way", c.Hosts[old].Name)
	sleepCtx(ctx, after)
	stop()
	wg.Wait()
	if err := c.agents[old].Wait(t.Context()); err == nil {
		t.Fatal("kat-agent exited cleanly after SIGKILL")
	}
	t.Logf("streamed %d commits and %d applies (%d acknowledged) through the failover", len(committed), len(acked)+len(failed), len(acked))
	if len(acked) == 0 || len(committed) == 0 {
		t.Fatalf("nothing streamed: %d commits, %d acknowledged applies", len(committed), len(acked))
	}

	head := repo.workloadsAtHead(t)
	if !slices.Equal(head, committed) {
		t.Fatalf("the repo's HEAD has %v, the stream committed %v", head, committed)
	}
	c.katcall(t, "sync", "stream")
	polltest.UntilErr(t, 2*time.Minute, "desired state = the repo's HEAD + every acknowledged apply", func() error {
		out, err := c.Katcall(t.Context(), c.bin.Katcall, "get", "workloads", "-n", "default", "-o", "json")
		if err != nil {
			return err
		}
		var ws []api.Workload
		if err := json.Unmarshal([]byte(out), &ws); err != nil {
			return fmt.Errorf("decode get workloads: %w", err)
		}
		var git, applied []string
		for _, w := range ws {
			switch {
			case strings.HasPrefix(w.Name, "git-"):
				if w.Owner.Kind != "git" || w.Owner.Source != "stream" || w.Generation != 1 {
					return fmt.Errorf("%s: owner %+v generation %d, want source stream and generation 1", w.Name, w.Owner, w.Generation)
				}
				git = append(git, w.Name)
			case strings.HasPrefix(w.Name, "api-"):
				if w.Owner.Kind != "api" || w.Generation != 1 {
					return fmt.Errorf("%s: owner %+v generation %d, want api and generation 1 (applied once)", w.Name, w.Owner, w.Generation)
				}
				applied = append(applied, w.Name)
			}
		}
		slices.Sort(git)
		if !slices.Equal(git, head) {
			return fmt.Errorf("Git workloads %v, the repo's HEAD has %v", git, head)
		}
		for _, name := range acked {
			if !slices.Contains(applied, name) {
				return fmt.Errorf("acknowledged apply %s is missing (have %v)", name, applied)
			}
		}
		for _, name := range applied {
			if !slices.Contains(acked, name) && !slices.Contains(failed, name) {
				return fmt.Errorf("workload %s was never applied", name)
			}
		}
		return nil
	})
	return old
}

// streamWorkload is a Service of no replicas: desired state only.
func streamWorkload(name string) string {
	return `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: ` + name + `, namespace: default}
spec:
  type: Service
  replicas: 0
  restartPolicy: {condition: Always}
  source: {image: "localhost/kat-base:latest"}
  container: {name: main, command: ["/bin/sh", "-c", "exec sleep 100000"]}
`
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// configRepo is a bare Git repository on the machine's file system (which
// every host shares: they differ in their network only) and a clone the
// test commits in.
type configRepo struct {
	bare, work string
}

func newConfigRepo(t *testing.T) *configRepo {
	t.Helper()
	dir := t.TempDir()
	r := &configRepo{bare: filepath.Join(dir, "config.git"), work: filepath.Join(dir, "work")}
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", r.bare},
		{"clone", "-q", r.bare, r.work},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := r.git("commit", "-q", "--allow-empty", "-m", "start"); err != nil {
		t.Fatal(err)
	}
	if err := r.git("push", "-q", "origin", "HEAD:main"); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *configRepo) git(args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = r.work
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=kat-test", "GIT_AUTHOR_EMAIL=test@kat.invalid",
		"GIT_COMMITTER_NAME=kat-test", "GIT_COMMITTER_EMAIL=test@kat.invalid")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// commitWorkload commits and pushes default/NAME/workload.kat.
func (r *configRepo) commitWorkload(name string) error {
	dir := filepath.Join(r.work, "default", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "workload.kat"), []byte(streamWorkload(name)), 0o644); err != nil {
		return err
	}
	if err := r.git("add", "-A"); err != nil {
		return err
	}
	if err := r.git("commit", "-q", "-m", "add "+name); err != nil {
		return err
	}
	return r.git("push", "-q", "origin", "HEAD:main")
}

// workloadsAtHead lists the workload directories of default/ at the bare
// repository's main, sorted.
func (r *configRepo) workloadsAtHead(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", r.bare, "ls-tree", "--name-only", "main", "default/").Output()
	if err != nil {
		t.Fatalf("git ls-tree: %v", err)
	}
	var names []string
	for _, l := range strings.Fields(string(out)) {
		names = append(names, strings.TrimPrefix(l, "default/"))
	}
	slices.Sort(names)
	return names
}
