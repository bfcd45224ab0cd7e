package gitsync

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/webhook"
)

// TestOneChangeOfFiveHundred changes one directory of 500 and checks that
// only that workload's generation moves.
func TestOneChangeOfFiveHundred(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("writes 500 workloads")
	}
	const n = 500
	r := newTestRemote(t)
	for i := range n {
		r.workload(fmt.Sprintf("apps/w%03d", i), "default", fmt.Sprintf("w%03d", i), 1)
	}
	c1 := r.Commit("500 workloads", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	if st := e.waitApplied("config", c1); st.Workloads != n {
		t.Fatalf("workloads = %d, want %d", st.Workloads, n)
	}
	before := e.generations()
	r.workload("apps/w250", "default", "w250", 2)
	c2 := r.Commit("scale w250", nil)
	e.waitApplied("config", c2)
	after := e.generations()
	changed := 0
	for k, g := range after {
		if g != before[k] {
			changed++
			if k != "default/w250" || g != before[k]+1 {
				t.Errorf("%s: generation %d -> %d", k, before[k], g)
			}
		}
	}
	if changed != 1 || len(after) != n {
		t.Errorf("%d generations changed of %d workloads, want exactly 1 of %d", changed, len(after), n)
	}
}

func TestDispatchPushMatchesURLFormsAndBranch(t *testing.T) {
	t.Parallel()
	r := newTestRemote(t)
	r.workload("web", "default", "web", 1)
	c1 := r.Commit("one", nil)
	e := newEnv(t)
	e.addSource(api.SourceSpec{URL: r.FileURL()})
	e.addSource(api.SourceSpec{Name: "gh", URL: "https://github.com/acme/config.git", Branch: "prod"})
	e.waitApplied("config", c1)
	e.eventually("both sources running", func() string {
		if n, _ := e.m.Trigger(""); n != 2 {
			return fmt.Sprintf("%d running", n)
		}
		return ""
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		push webhook.Push
		want int
	}{
		{"ssh form", webhook.Push{RepoURLs: []string{"git@GitHub.com:acme/config.git"}, Ref: "refs/heads/prod"}, 1},
		{"html form", webhook.Push{RepoURLs: []string{"https://github.com/acme/config/"}, Ref: "refs/heads/prod"}, 1},
		{"other branch", webhook.Push{RepoURLs: []string{"https://github.com/acme/config.git"}, Ref: "refs/heads/main"}, 0},
		{"other repo", webhook.Push{RepoURLs: []string{"https://github.com/acme/other.git"}, Ref: "refs/heads/prod"}, 0},
		{"file repo", webhook.Push{RepoURLs: []string{r.FileURL()}, Ref: "refs/heads/main"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := e.m.DispatchPush(ctx, tc.push); err != nil || got != tc.want {
				t.Errorf("DispatchPush = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

// TestDamagedCloneIsClonedAgain damages the clone of a source served over
// HTTP while the leader is down (objects lost, or the repository
// unreadable); after a restart the next commit, which needs an unchanged
// directory's objects, is still applied.
func TestDamagedCloneIsClonedAgain(t *testing.T) {
	t.Parallel()
	damages := []struct {
		name   string
		damage func(t *testing.T, clone string)
	}{
		{"objects lost", func(t *testing.T, clone string) {
			t.Helper()
			objects := filepath.Join(clone, "objects")
			if err := os.RemoveAll(objects); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(objects, "pack"), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"unreadable repository", func(t *testing.T, clone string) {
			t.Helper()
			if err := os.WriteFile(filepath.Join(clone, "config"), []byte("[[[not git config"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestRemote(t)
			r.workload("web", "default", "web", 1)
			r.workload("db", "default", "db", 1)
			c1 := r.Commit("one", nil)
			_, url := newGitServer(t, r)
			e := newEnv(t)
			e.addSource(api.SourceSpec{URL: url})
			e.waitApplied("config", c1)
			e.stop()
			tc.damage(t, filepath.Join(e.dataDir, "config"))
			r.workload("web", "default", "web", 2)
			c2 := r.Commit("two", nil)
			e.start()
			e.waitApplied("config", c2)
			if g := e.generations(); g["default/web"] != 2 || g["default/db"] != 1 {
				t.Errorf("generations = %v, want web 2 and db 1", g)
			}
		})
	}
}
