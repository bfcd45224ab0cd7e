package agent

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// fakeBuilder fails the commits in fail, builds the others.
type fakeBuilder struct {
	mu       sync.Mutex
	block    chan struct{} // when set, every build waits for it to close
	fail     map[string]*build.FailedError
	reqs     []build.Request
	pruned   int
	released []string
}

func (f *fakeBuilder) Build(ctx context.Context, req build.Request) (api.Build, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return api.Build{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	if fe := f.fail[req.Commit]; fe != nil {
		return api.Build{Image: req.Image(), State: api.BuildFailed}, fe
	}
	return api.Build{Image: req.Image(), State: api.BuildSucceeded}, nil
}

func (f *fakeBuilder) Prune(context.Context, string, string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruned++
	return nil, nil
}

func (f *fakeBuilder) Release(_, _, commit string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, commit)
}

func (f *fakeBuilder) Log(_, _, commit string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("log of " + commit + "\n")), nil
}

const gitWorkloadYAML = `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source:
    git: {repository: "https://git.example.com/app.git", branch: main}
  restartPolicy: {condition: Always}
  container:
    command: ["httpd", "-f"]
`

const buildYAML = `apiVersion: kat.dws.rip/v1alpha1
kind: BuildDefinition
spec:
  buildContext: .
  dockerfilePath: Dockerfile
  buildArgs: {A: b}
`

// buildSlot is the user namespace slot of the workload assignBuild assigns.
var buildSlot = 7

// assignBuild applies the Git workload ns1/app (so it has a status) and
// assigns one instance of commit.
func (e *agentEnv) assignBuild(id, commit string) api.Assignment {
	e.t.Helper()
	files := map[string][]byte{"workload.kat": []byte(gitWorkloadYAML), "build.kat": []byte(buildYAML)}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.repo.EnsureNamespace(ctx, "ns1", nil); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err != nil {
		e.t.Fatal(err)
	}
	a := api.Assignment{InstanceID: id, Node: "n1", Namespace: "ns1", Workload: "app", SpecHash: "h", Generation: 1,
		Image: api.ImageName("ns1", "app", commit), RestartPolicy: "Always", Files: files, CreatedAt: time.Now(),
		SourceCommit: commit, Build: &api.BuildRef{Repository: "https://git.example.com/app.git", Commit: commit}, UserNSSlot: &buildSlot}
	if _, err := e.repo.WriteAssignments(ctx, []api.Assignment{a}, nil); err != nil {
		e.t.Fatal(err)
	}
	return a
}

func TestAgentBuildsInsteadOfPulling(t *testing.T) {
	t.Parallel()
	good, bad := strings.Repeat("a", 40), strings.Repeat("b", 40)
	fb := &fakeBuilder{fail: map[string]*build.FailedError{bad: {
		Namespace: "ns1", Workload: "app", Commit: bad, Stage: build.StageBuild,
		LogTail: "STEP 2/2: RUN false\nError: building at STEP \"RUN false\": exit status 1\n", Err: errors.New("podman build: exit status 1"),
	}}}
	e := newAgentEnv(t)
	e.builder = fb
	e.buildAuth = api.GitAuth{TokenFile: "/etc/kat/app.token"}
	old := e.assignBuild("app-1", good)
	ag, _ := e.start()
	e.waitFor("the built instance running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["app-1"].Phase == api.InstanceRunning
	})
	if c := e.rt.byInstance()["app-1"]; c.Image != "kat-local/ns1_app:aaaaaaaaaaaa" {
		t.Fatalf("container image %q", c.Image)
	}
	fb.mu.Lock()
	req := fb.reqs[0]
	fb.mu.Unlock()
	if req.Commit != good || req.Repository != "https://git.example.com/app.git" || req.Spec.BuildArgs["A"] != "b" ||
		req.Auth.TokenFile != "/etc/kat/app.token" || req.Ref != "refs/heads/main" || req.UserNSSlot == nil || *req.UserNSSlot != buildSlot {
		t.Fatalf("build request %+v", req)
	}
	polltest.Until(t, 10*time.Second, "the build released once its container runs", func() bool {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		return slices.Contains(fb.released, good)
	})

	// A broken commit: the new instance fails with the build's error, the
	// old instance keeps running, and an event says so. (The BuildFailed
	// condition is the leader's, derived from the build record.)
	e.assignBuild("app-2", bad)
	e.waitFor("the broken build's instance failed", ag, func(m map[string]api.InstanceStatus) bool {
		return m["app-2"].Phase == api.InstanceFailed && strings.Contains(m["app-2"].Message, "exit status 1") &&
			m["app-1"].Phase == api.InstanceRunning
	})
	evs, err := e.repo.ListEvents(context.Background(), 10)
	if err != nil || len(evs) == 0 || evs[len(evs)-1].Reason != api.ReasonBuildFailed {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	// Builds are events both ways, about the workload.
	var reasons []string
	for _, ev := range evs {
		if ev.Kind != api.KindWorkload || ev.Namespace != "ns1" || ev.Name != "app" || ev.Object != "workload/ns1/app" {
			t.Fatalf("build event %+v is not about workload ns1/app", ev)
		}
		reasons = append(reasons, ev.Type+" "+ev.Reason)
	}
	if want := "Normal BuildSucceeded,Warning BuildFailed"; strings.Join(reasons, ",") != want {
		t.Fatalf("build events %q, want %q", reasons, want)
	}

	// Removing the old instance after a good build prunes old images.
	if _, err := e.repo.WriteAssignments(context.Background(), nil, []api.Assignment{old}); err != nil {
		t.Fatal(err)
	}
	e.assignBuild("app-3", strings.Repeat("c", 40))
	e.waitFor("the fixed instance running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["app-3"].Phase == api.InstanceRunning
	})
	polltest.Until(t, 10*time.Second, "image housekeeping after the old instance went", func() bool {
		fb.mu.Lock()
		defer fb.mu.Unlock()
		return fb.pruned > 0
	})
	var sb strings.Builder
	if err := ag.BuildLog("ns1", "app", good, &sb); err != nil || sb.String() != "log of "+good+"\n" {
		t.Fatalf("BuildLog = %q, %v", sb.String(), err)
	}
}

// TestAgentBuildDoesNotHoldRuntimeSlot: while a build runs, the single
// runtime slot stays free for other instances.
func TestAgentBuildDoesNotHoldRuntimeSlot(t *testing.T) {
	t.Parallel()
	fb := &fakeBuilder{block: make(chan struct{})}
	e := newAgentEnv(t)
	e.builder = fb
	e.assignBuild("app-1", strings.Repeat("a", 40))
	e.assign("web-1", quadlet.RestartAlways, "httpd -f", false)
	ag, _ := e.start()
	e.waitFor("the pulled instance running while the build waits", ag, func(m map[string]api.InstanceStatus) bool {
		return m["web-1"].Phase == api.InstanceRunning && m["app-1"].Phase == api.InstancePending
	})
	close(fb.block)
	e.waitFor("the built instance running", ag, func(m map[string]api.InstanceStatus) bool {
		return m["app-1"].Phase == api.InstanceRunning
	})
}
