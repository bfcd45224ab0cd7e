package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

const testCommit = "0123456789abcdef0123456789abcdef01234567"

func TestRequestNormalize(t *testing.T) {
	ok := func() Request {
		return Request{Namespace: "default", Workload: "web", Repository: "https://git.example.com/app.git", Commit: testCommit}
	}
	for _, tc := range []struct {
		name   string
		edit   func(r *Request)
		field  string                 // "" means valid
		verify func(r Request) string // what is wrong, or ""
	}{
		{name: "defaults", edit: func(*Request) {}, verify: func(r Request) string {
			if r.Spec.BuildContext != "." || r.Spec.DockerfilePath != "Dockerfile" {
				return fmt.Sprintf("defaults %q %q", r.Spec.BuildContext, r.Spec.DockerfilePath)
			}
			return ""
		}},
		{name: "upper-case commit", edit: func(r *Request) { r.Commit = strings.ToUpper(testCommit) }, verify: func(r Request) string {
			if r.Commit != testCommit {
				return fmt.Sprintf("commit %q", r.Commit)
			}
			return ""
		}},
		{name: "bad namespace", edit: func(r *Request) { r.Namespace = "Default" }, field: "namespace"},
		{name: "bad workload", edit: func(r *Request) { r.Workload = "a/b" }, field: "workload"},
		{name: "no repository", edit: func(r *Request) { r.Repository = " " }, field: "repository"},
		{name: "short commit", edit: func(r *Request) { r.Commit = "0123456" }, field: "commit"},
		{name: "branch as commit", edit: func(r *Request) { r.Commit = "main" }, field: "commit"},
		{name: "context up", edit: func(r *Request) { r.Spec.BuildContext = "a/../.." }, field: "spec.buildContext"},
		{name: "absolute context", edit: func(r *Request) { r.Spec.BuildContext = "/etc" }, field: "spec.buildContext"},
		{name: "dockerfile up", edit: func(r *Request) { r.Spec.BuildContext = "app"; r.Spec.DockerfilePath = "../../Dockerfile" }, field: "spec.dockerfilePath"},
		{name: "dockerfile up into repo", edit: func(r *Request) { r.Spec.BuildContext = "app"; r.Spec.DockerfilePath = "../Dockerfile" }},
		{name: "absolute dockerfile", edit: func(r *Request) { r.Spec.DockerfilePath = "/Dockerfile" }, field: "spec.dockerfilePath"},
		{name: "build arg with =", edit: func(r *Request) { r.Spec.BuildArgs = map[string]string{"A=B": "x"} }, field: "spec.buildArgs"},
		{name: "flag as target", edit: func(r *Request) { r.Spec.TargetStage = "--rm" }, field: "spec.targetStage"},
		{name: "space in platform", edit: func(r *Request) { r.Spec.Platform = "linux/amd64 x" }, field: "spec.platform"},
		{name: "space in cache", edit: func(r *Request) { r.CacheImage = "reg/app x" }, field: "cache registry path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.edit(&r)
			err := r.normalize()
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.field != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field)):
				t.Fatalf("err %v: want ErrInvalid naming %s", err, tc.field)
			}
			if tc.verify != nil {
				if msg := tc.verify(r); msg != "" {
					t.Error(msg)
				}
			}
		})
	}
}

func TestNames(t *testing.T) {
	if got := (&Request{Namespace: "prod", Workload: "web", Commit: testCommit}).Image(); got != "kat-local/prod_web:0123456789ab" {
		t.Errorf("Image = %q", got)
	}
	r := Request{CacheImage: "reg.example.com/cache/web"}
	if r.RegistryPath() != "reg.example.com/cache/web" {
		t.Errorf("RegistryPath from CacheImage = %q", r.RegistryPath())
	}
	r.Spec.Cache = &quadlet.BuildCache{RegistryPath: "127.0.0.1:5000/c/web"}
	if r.RegistryPath() != "127.0.0.1:5000/c/web" {
		t.Errorf("RegistryPath from build.kat = %q", r.RegistryPath())
	}
}

func TestBuildArgs(t *testing.T) {
	req := Request{Namespace: "prod", Workload: "web", Commit: testCommit, Spec: quadlet.BuildSpec{
		BuildArgs: map[string]string{"B": "2", "A": "one two"}, TargetStage: "app", Platform: "linux/arm64",
	}}
	got := shellJoin(buildArgs(&req, "kat-local/prod_web:0123456789ab", "/c/Dockerfile", "/c", "/t/iid"))
	want := `build --tag kat-local/prod_web:0123456789ab --file /c/Dockerfile --iidfile /t/iid --isolation oci --userns host ` +
		`--build-arg "A=one two" --build-arg B=2 --target app --platform linux/arm64 -- /c`
	if got != want {
		t.Errorf("args\n got %s\nwant %s", got, want)
	}

	// RUN steps run through the wrapper, in the workload's slot.
	ids := &runtime.SubIDRange{Start: 2147483647, Count: 2147483648}
	slot := 2
	m, which, err := idMapFor(ids, &slot)
	if err != nil {
		t.Fatal(err)
	}
	ns := buildNS{host: hostSetup{wrapper: "/w/kat-build-runtime", runtime: "/usr/bin/runc", overlayHome: "/s/overlay"}, m: *m}
	if got, want := shellJoin(slices.Concat(ns.env(), ns.globalArgs())),
		"KAT_BUILD_IDMAP=0:2147614719:65536 KAT_BUILD_OCI_RUNTIME=/usr/bin/runc KAT_BUILD_OVERLAY_HOME=/s/overlay --runtime /w/kat-build-runtime"; got != want {
		t.Errorf("environment and global args\n got %s\nwant %s", got, want)
	}
	if d := ns.describe(which); !strings.Contains(d, "host ids 2147614719-2147680254 (the workload's slot 2 of") {
		t.Errorf("log line %q", d)
	}
}

func TestIDMapFor(t *testing.T) {
	ids := &runtime.SubIDRange{Start: 100000, Count: 4 * runtime.IDMapSize}
	slot := func(n int) *int { return &n }
	for _, tc := range []struct {
		name  string
		ids   *runtime.SubIDRange
		slot  *int
		base  int64
		which string // a part of it
		err   error
	}{
		{name: "workload slot", ids: ids, slot: slot(1), base: 100000 + runtime.IDMapSize, which: "the workload's slot 1"},
		{name: "first slot", ids: ids, slot: slot(0), base: 100000, which: "the workload's slot 0"},
		{name: "no slot: the last", ids: ids, base: 100000 + 3*runtime.IDMapSize, which: "slot 3, the range's last (the workload has none)"},
		{name: "slot outside", ids: ids, slot: slot(4), base: 100000 + 3*runtime.IDMapSize, which: "slot 4 is outside the range"},
		{name: "negative slot", ids: ids, slot: slot(-1), base: 100000 + 3*runtime.IDMapSize, which: "outside"},
		{name: "no range", slot: slot(0), err: ErrNoSubIDs},
		{name: "range too small", ids: &runtime.SubIDRange{Start: 100000, Count: 10}, err: ErrNoSubIDs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, which, err := idMapFor(tc.ids, tc.slot)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.HostBase != tc.base || !strings.Contains(which, tc.which) {
				t.Errorf("map %d (%s), want %d (%s)", m.HostBase, which, tc.base, tc.which)
			}
		})
	}
	if !strings.Contains(ErrNoSubIDs.Error(), "/etc/subuid") {
		t.Errorf("ErrNoSubIDs does not name /etc/subuid: %v", ErrNoSubIDs)
	}
}

func TestRegistryArgs(t *testing.T) {
	for _, tc := range []struct {
		ref, host string
		insecure  bool
	}{
		{"127.0.0.1:5000/cache/app:abc", "127.0.0.1:5000", true},
		{"localhost/cache/app:abc", "localhost", false},
		{"reg.example.com/app:abc", "reg.example.com", false},
		{"library/app:abc", "docker.io", false},
		{"app:abc", "docker.io", false},
	} {
		if h := registryHost(tc.ref); h != tc.host {
			t.Errorf("registryHost(%q) = %q, want %q", tc.ref, h, tc.host)
		}
		args := strings.Join(registryArgs(tc.ref, "/auth.json", []string{"127.0.0.1:5000"}), " ")
		if want := "--authfile /auth.json"; !strings.HasPrefix(args, want) {
			t.Errorf("%s: args %q lack %q", tc.ref, args, want)
		}
		if got := strings.Contains(args, "--tls-verify=false"); got != tc.insecure {
			t.Errorf("%s: insecure %t, want %t", tc.ref, got, tc.insecure)
		}
	}
}

func TestTail(t *testing.T) {
	var tl tail
	for i := range 2000 {
		fmt.Fprintf(&tl, "line %04d\n", i)
	}
	s := tl.String()
	if len(s) > tailSize || !strings.HasPrefix(s, "line ") || !strings.HasSuffix(s, "line 1999\n") {
		t.Errorf("tail of %d bytes starts %q ends %q", len(s), s[:12], s[len(s)-12:])
	}
	var short tail
	fmt.Fprint(&short, "only this")
	if short.String() != "only this" {
		t.Errorf("short tail %q", short.String())
	}
}

func TestPlanPrune(t *testing.T) {
	at := func(min int) time.Time { return time.Unix(1_700_000_000+int64(min)*60, 0) }
	imgs := []imageInfo{
		{"r:a", "id-a", at(1)}, {"r:b", "id-b", at(2)}, {"r:c", "id-c", at(3)},
		{"r:d", "id-d", at(4)}, {"r:e", "id-e", at(5)}, {"r:e2", "id-e", at(5)},
	}
	for _, tc := range []struct {
		name    string
		used    map[string]bool
		keep    int
		protect string
		want    string
	}{
		{name: "keep 3", keep: 3, want: "r:c r:b r:a"},
		{name: "keep 3, one in use", keep: 3, used: map[string]bool{"id-b": true}, want: "r:c r:a"},
		{name: "keep 1, shared ID", keep: 1, want: "r:e r:d r:c r:b r:a"},
		{name: "keep 10", keep: 10, want: ""},
		{name: "protected", keep: 2, protect: "r:a", want: "r:d r:c r:b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(planPrune(imgs, tc.used, tc.keep, tc.protect), " ")
			if got != tc.want {
				t.Errorf("remove %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolvePaths(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	writeFile(t, filepath.Join(root, "app", "Dockerfile"), "FROM x\n")
	writeFile(t, filepath.Join(root, "Dockerfile"), "FROM x\n")
	writeFile(t, filepath.Join(outside, "Dockerfile"), "FROM x\n")
	for name, target := range map[string]string{"out": outside, "app/evil": filepath.Join(outside, "Dockerfile"), "in": "app", "dir/Dockerfile": "../app"} {
		writeFile(t, filepath.Join(root, "placeholder"), "")
		_ = os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755)
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		context, dockerfile string
		ok                  bool
	}{
		{".", "Dockerfile", true},
		{"app", "Dockerfile", true},
		{"app", "../Dockerfile", true},
		{"in", "Dockerfile", true},
		{"out", "Dockerfile", false},
		{"app", "evil", false},
		{"missing", "Dockerfile", false},
		{".", "app", false},            // a directory, not a file
		{".", "dir/Dockerfile", false}, // a symlink to a directory
	} {
		_, _, err := resolvePaths(root, tc.context, tc.dockerfile)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("context %q dockerfile %q: err %v, want ok=%t", tc.context, tc.dockerfile, err, tc.ok)
		}
	}
}

func TestLogsKeepNewest(t *testing.T) {
	pm := runtime.NewPodman(runtime.PodmanConfig{})
	t.Cleanup(func() { _ = pm.Close() })
	b, err := New(Config{Node: "n", WorkDir: t.TempDir(), Podman: pm, KeepLogs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var paths []string
	for i := range 4 {
		p := b.logPath("default", "web", fmt.Sprintf("%012d", i))
		writeFile(t, p, fmt.Sprintf("log %d\n", i))
		mod := time.Unix(1_700_000_000+int64(i), 0)
		if err := os.Chtimes(p, mod, mod); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	if err := b.pruneLogs("default", "web", paths[0]); err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		_, err := os.Stat(p)
		if want := i != 1; (err == nil) != want {
			t.Errorf("log %d kept=%t, want %t", i, err == nil, want)
		}
	}
	rc, err := b.Log("default", "web", "000000000003")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, err := b.Log("default", "web", "000000000001"); !errors.Is(err, ErrLogNotFound) {
		t.Errorf("pruned log: err %v, want ErrLogNotFound", err)
	}
	if _, err := b.Log("default", "../x", "000000000003"); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad workload: err %v, want ErrInvalid", err)
	}
}

func TestNewChecksConfig(t *testing.T) {
	pm := runtime.NewPodman(runtime.PodmanConfig{})
	t.Cleanup(func() { _ = pm.Close() })
	for _, cfg := range []Config{{WorkDir: "x", Podman: pm}, {Node: "n", Podman: pm}, {Node: "n", WorkDir: "x"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	b, err := New(Config{Node: "n", WorkDir: t.TempDir(), Podman: pm})
	if err != nil {
		t.Fatal(err)
	}
	if b.cfg.Timeout != 10*time.Minute || b.cfg.KeepImages != 3 || b.cfg.KeepLogs != 10 {
		t.Errorf("defaults %+v", b.cfg)
	}
	_ = b.Close()
	if _, err := b.Build(context.Background(), Request{Namespace: "a", Workload: "b", Repository: "x", Commit: testCommit}); !errors.Is(err, ErrClosed) {
		t.Errorf("build after close: %v", err)
	}
}

func TestDescendants(t *testing.T) {
	proc := t.TempDir()
	for pid, ppid := range map[int]int{10: 1, 11: 10, 12: 11, 13: 10, 20: 1} {
		writeFile(t, filepath.Join(proc, fmt.Sprint(pid), "stat"), fmt.Sprintf("%d (a b) c) S %d 0 0\n", pid, ppid))
	}
	got := fmt.Sprint(descendants(proc, 10))
	if got != "[11 13 12]" && got != "[13 11 12]" {
		t.Errorf("descendants of 10 = %s", got)
	}
}

func TestBuildResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rec  api.Build
		err  error
		want string
	}{
		{"built", api.Build{}, nil, metrics.ResultBuilt},
		{"from the cache", api.Build{CacheHit: true}, nil, metrics.ResultCacheHit},
		{"already there", api.Build{Existing: true}, nil, metrics.ResultExisting},
		{"failed", api.Build{CacheHit: true}, errors.New("boom"), metrics.ResultFailure},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildResult(tc.rec, tc.err); got != tc.want {
				t.Errorf("buildResult = %q, want %q", got, tc.want)
			}
		})
	}
}
