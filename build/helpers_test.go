package build

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/build/usernsrun"
	"kat.dws.rip/kat/gitx/gittest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/runtime"
)

const baseImage = "localhost/kat-base:latest"

// store is the private Podman store of this test binary (storage, run
// root and tmp dir under a temporary directory) with the base image built
// into it. Tests use it rather than the machine's shared store, which other
// test suites may keep busy or locked.
var (
	store    runtime.PodmanConfig
	storeErr error
	// subIDs is the sub-id range of user containers, RUN steps' user
	// namespaces come from; nil when the host has none (subIDErr).
	subIDs   *runtime.SubIDRange
	subIDErr error
)

func TestMain(m *testing.M) {
	// Builders run RUN steps through this test binary.
	usernsrun.Main()
	if r, err := runtime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers"); err != nil {
		subIDErr = err
	} else {
		subIDs = &r
	}
	dir, err := os.MkdirTemp("", "kat-build-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	storeErr = setUpStore(dir)
	code := m.Run()
	if storeErr == nil {
		_ = exec.Command("podman", append(runtime.NewPodman(store).GlobalArgs(), "rmi", "--all", "--force")...).Run()
	}
	unmountUnder(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }, dir)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func setUpStore(dir string) error {
	if _, err := exec.LookPath("podman"); err != nil {
		return errors.New("podman is not installed (scripts/install-prereqs.sh installs it)")
	}
	store = runtime.PodmanConfig{
		Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"), TmpDir: filepath.Join(dir, "tmp"),
	}
	cmd := exec.Command("bash", "../scripts/build-base-image.sh")
	cmd.Env = append(os.Environ(), "KAT_PODMAN_ARGS="+strings.Join(runtime.NewPodman(store).GlobalArgs(), " "), "KAT_BASE_IMAGE="+baseImage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s in a private store with scripts/build-base-image.sh: %w\n%s", baseImage, err, out)
	}
	return nil
}

// needPodman skips the test unless podman, the base image and the sub-id
// range of user containers are present.
func needPodman(t testing.TB) {
	t.Helper()
	if storeErr != nil {
		skipOrFail(t, "%v", storeErr)
	}
	if subIDErr != nil {
		skipOrFail(t, "builds need the sub-id range of user containers (scripts/install-prereqs.sh adds it): %v", subIDErr)
	}
}

// storeArgs are the podman global arguments of the private store.
func storeArgs() []string { return runtime.NewPodman(store).GlobalArgs() }

// randomName returns a DNS label unique to this test run.
func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// appRepo is an app repository served over Git smart HTTP (gittest), with
// a working clone that commits to it.
type appRepo struct {
	*gittest.Repo
	url string
}

// appRepoOptions tunes the server of an appRepo.
type appRepoOptions struct {
	// allowSHA lets clients fetch a commit by hash (shallow builds).
	allowSHA bool
	// user and password, when set, are required as HTTP basic auth.
	user, password string
}

func newAppRepo(t testing.TB, opts appRepoOptions) *appRepo {
	t.Helper()
	r := gittest.NewRepo(t, "app")
	srv := gittest.Serve(t, r, gittest.ServerOptions{AllowSHA: opts.allowSHA, User: opts.user, Password: opts.password})
	return &appRepo{Repo: r, url: srv.RepoURL}
}

// sampleApp is an app whose image serves index.html with busybox httpd.
var sampleApp = map[string]string{
	"Dockerfile": "FROM " + baseImage + "\nCOPY index.html /www/index.html\nCMD [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/www\"]\n",
	"index.html": "<h1>hello from kat</h1>\n",
}

// testPodman returns the driver of the shared store and removes the
// images of the workload when the test ends.
func testBuilder(t testing.TB, cfg Config, namespace, workload string) (*Builder, *MemoryRecords) {
	t.Helper()
	if cfg.Podman == nil {
		cfg.Podman = runtime.NewPodman(store)
	}
	if cfg.Node == "" {
		cfg.Node = "node-test"
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = t.TempDir()
	}
	recs := &MemoryRecords{}
	if cfg.Records == nil {
		cfg.Records = recs
	}
	if cfg.Hold == 0 {
		cfg.Hold = time.Millisecond // nothing releases builds in these tests
	}
	if cfg.SubIDs == nil {
		cfg.SubIDs = subIDs
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = b.Close()
		if t.Failed() {
			dumpLogs(t, b.cfg.WorkDir)
		}
		removeImages(t, b.pm, namespace, workload)
		if err := cfg.Podman.Close(); err != nil {
			t.Error(err)
		}
	})
	return b, recs
}

// removeImages removes every kat-local image of a workload from a store.
func removeImages(t testing.TB, pm podman, namespace, workload string) {
	t.Helper()
	ctx := context.Background()
	imgs, err := pm.listImages(ctx, api.ImageRepository(namespace, workload))
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	for _, im := range imgs {
		if _, err := pm.run(ctx, "rmi", "--force", "--", im.Name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	}
}

// podmanOutput runs podman with global args and returns its stdout.
func podmanOutput(t testing.TB, global []string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("podman", append(global, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// freshStore returns podman global args for a new, empty store under a
// temporary directory, with the base image loaded into it.
func freshStore(t testing.TB) runtime.PodmanConfig {
	t.Helper()
	dir := t.TempDir()
	cfg := runtime.PodmanConfig{
		Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"), TmpDir: filepath.Join(dir, "tmp"),
	}
	global := runtime.NewPodman(cfg).GlobalArgs()
	archive := filepath.Join(dir, "base.tar")
	podmanOutput(t, storeArgs(), "save", "--quiet", "--output", archive, baseImage)
	podmanOutput(t, global, "load", "--quiet", "--input", archive)
	t.Cleanup(func() {
		// Drop the images and any mount podman left under dir before the
		// temporary directory goes. (Not "system reset": it would remove
		// the networks every store shares.)
		_ = exec.Command("podman", append(global, "rmi", "--all", "--force")...).Run()
		unmountUnder(t.Logf, dir)
	})
	return cfg
}

// unmountUnder unmounts every mount point under dir, deepest first.
func unmountUnder(logf func(format string, args ...any), dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			logf("cleanup: unmount %s: %v", points[i], err)
		}
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func strconvItoa(n int) string { return fmt.Sprint(n) }

// dumpLogs prints every build log under a work dir, for a failed test.
func dumpLogs(t testing.TB, workDir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(workDir, "logs", "*", "*", "*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		t.Logf("build log %s:\n%s", l, b)
	}
}

var skipOrFail = testenv.SkipOrFail

// settle waits until the builds and what follows them (the cache push,
// housekeeping) are done. Only for tests that start no build meanwhile.
func (b *Builder) settle() { b.wg.Wait() }
