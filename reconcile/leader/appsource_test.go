package leader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
	"kat.dws.rip/kat/webhook"
)

func TestPlanAppSources(t *testing.T) {
	now := time.Unix(1000, 0)
	const iv = 30 * time.Second
	repo := "https://git.example.com/app.git"
	main := quadlet.GitSource{Repository: repo, Branch: "main"}
	w := func(k string, g quadlet.GitSource) appWorkload { return appWorkload{Key: k, Git: g} }
	rec := func(ref string) resources.AppSource {
		return resources.AppSource{Repository: repo, Ref: ref, Commit: "c"}
	}
	tests := []struct {
		name      string
		ws        []appWorkload
		recs      map[string]resources.AppSource
		lastCheck map[string]time.Time
		forced    map[string]bool
		want      string
	}{
		{name: "never resolved", ws: []appWorkload{w("a/x", main)}, want: "due [a/x] delete []"},
		{name: "checked recently", ws: []appWorkload{w("a/x", main)}, recs: map[string]resources.AppSource{"a/x": rec("branch main")},
			lastCheck: map[string]time.Time{"a/x": now.Add(-time.Second)}, want: "due [] delete []"},
		{name: "interval passed", ws: []appWorkload{w("a/x", main)}, recs: map[string]resources.AppSource{"a/x": rec("branch main")},
			lastCheck: map[string]time.Time{"a/x": now.Add(-iv)}, want: "due [a/x] delete []"},
		{name: "webhook forces", ws: []appWorkload{w("a/x", main)}, recs: map[string]resources.AppSource{"a/x": rec("branch main")},
			lastCheck: map[string]time.Time{"a/x": now}, forced: map[string]bool{"a/x": true}, want: "due [a/x] delete []"},
		{name: "a new leader checks once", ws: []appWorkload{w("a/x", main)}, recs: map[string]resources.AppSource{"a/x": rec("branch main")},
			want: "due [a/x] delete []"},
		{name: "ref changed", ws: []appWorkload{w("a/x", main)}, recs: map[string]resources.AppSource{"a/x": rec("tag v1")},
			lastCheck: map[string]time.Time{"a/x": now}, want: "due [a/x] delete []"},
		{name: "no longer built from Git", recs: map[string]resources.AppSource{"a/x": rec("branch main")}, want: "due [] delete [a/x]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := planAppSources(tc.ws, tc.recs, tc.lastCheck, tc.forced, now, iv)
			if got := fmt.Sprintf("due %v delete %v", p.Due, p.Delete); got != tc.want {
				t.Fatalf("plan = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPushMatches(t *testing.T) {
	repo := "https://git.example.com/team/app.git"
	push := func(ref string) webhook.Push {
		return webhook.Push{RepoURLs: []string{"git@git.example.com:team/app.git"}, Ref: ref}
	}
	tests := []struct {
		name string
		git  quadlet.GitSource
		push webhook.Push
		want bool
	}{
		{"branch pushed", quadlet.GitSource{Repository: repo, Branch: "main"}, push("refs/heads/main"), true},
		{"other branch", quadlet.GitSource{Repository: repo, Branch: "main"}, push("refs/heads/dev"), false},
		{"tag pushed", quadlet.GitSource{Repository: repo, Tag: "v1"}, push("refs/tags/v1"), true},
		{"pinned commit never moves", quadlet.GitSource{Repository: repo, Commit: "abcd"}, push("refs/heads/main"), false},
		{"default branch: any branch", quadlet.GitSource{Repository: repo}, push("refs/heads/whatever"), true},
		{"other repository", quadlet.GitSource{Repository: "https://git.example.com/team/other.git", Branch: "main"}, push("refs/heads/main"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := pushMatches(tc.push, tc.git); got != tc.want {
				t.Fatalf("pushMatches = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAppSourcesLoop runs the loop over a real etcd: a Git workload's ref is
// resolved and recorded, a matching webhook brings the new commit at once
// (the poll interval is an hour), a non-matching one matches nothing, and a
// new loop (a new leader) keeps the record.
func TestAppSourcesLoop(t *testing.T) {
	repo := resources.New(storetest.New(t))
	ctx := context.Background()
	if _, err := repo.EnsureNamespace(ctx, "ns1", nil); err != nil {
		t.Fatal(err)
	}
	d := gitDesiredSpec(t, "app")
	q, err := quadlet.ParseWorkload(d.Files, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	head := ""
	resolve := func(_ context.Context, g quadlet.GitSource) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if g.Branch != "main" {
			return "", fmt.Errorf("unexpected ref %+v", g)
		}
		if head == "" {
			return "", errors.New("branch \"main\" not found")
		}
		return head, nil
	}
	cond := func() *resources.Condition {
		w, err := repo.GetWorkload(ctx, "ns1", "app")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range w.Status.Conditions {
			if c.Type == ConditionSourceResolved {
				return &c
			}
		}
		return nil
	}
	run := func() (*AppSources, func()) {
		s := NewAppSources(AppSourcesConfig{Repo: repo, Interval: time.Hour, Resolve: resolve})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(rctx) }()
		return s, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	waitCommit := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			recs, err := repo.ListAppSources(ctx)
			if err == nil && recs["ns1/app"].Commit == want {
				if r := recs["ns1/app"]; r.Ref != "branch main" || r.Repository != "https://git.example.com/app.git" {
					t.Fatalf("record %+v", r)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("commit %s not recorded: %+v, %v", want[:8], recs, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	s, stop := run()
	deadline := time.Now().Add(10 * time.Second)
	for c := cond(); c == nil || c.Reason != "ResolveFailed"; c = cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no ResolveFailed condition: %+v", c)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	head = strings.Repeat("1", 40)
	mu.Unlock()
	if n, _ := s.DispatchPush(ctx, webhook.Push{RepoURLs: []string{"https://git.example.com/app.git"}, Ref: "refs/heads/main"}); n != 1 {
		t.Fatalf("push matched %d", n)
	}
	waitCommit(head)
	if c := cond(); c != nil {
		t.Fatalf("SourceResolved condition left after a success: %+v", c)
	}

	mu.Lock()
	head = strings.Repeat("2", 40)
	mu.Unlock()
	other := webhook.Push{RepoURLs: []string{"https://git.example.com/other.git"}, Ref: "refs/heads/main"}
	if n, _ := s.DispatchPush(ctx, other); n != 0 {
		t.Fatalf("push to another repository matched %d workloads", n)
	}
	push := webhook.Push{RepoURLs: []string{"https://git.example.com/app"}, Ref: "refs/heads/main"}
	if n, _ := s.DispatchPush(ctx, push); n != 1 {
		t.Fatalf("push to the app repository matched %d workloads, want 1", n)
	}
	waitCommit(head)
	stop()

	// A new leader: the record is there before it resolves anything.
	recs, err := repo.ListAppSources(ctx)
	if err != nil || recs["ns1/app"].Commit != head {
		t.Fatalf("after the loop ended: %+v, %v", recs, err)
	}

	// The workload goes: its record and its build records go too.
	if err := repo.PutBuildRecordJSON(ctx, "ns1", "app", head, "n1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.DeleteWorkload(ctx, resources.DeleteRequest{Namespace: "ns1", Name: "app"}); err != nil {
		t.Fatal(err)
	}
	_, stop = run()
	defer stop()
	deadline = time.Now().Add(10 * time.Second)
	for {
		recs, _ := repo.ListAppSources(ctx)
		kvs, _ := repo.ListBuildRecordsJSON(ctx, "ns1", "app", "")
		if len(recs) == 0 && len(kvs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the workload went: app sources %+v, %d build records", recs, len(kvs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
