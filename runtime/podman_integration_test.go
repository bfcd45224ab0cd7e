package runtime

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
)

// baseImage is the image integration tests run; scripts/build-base-image.sh
// builds it.
const baseImage = "localhost/kat-base:latest"

// testLabel marks every container of one test so cleanup finds them.
const testLabel = "kat.test"

// podmanForTest returns a driver using the machine's podman storage (or
// KAT_PODMAN_ARGS's global args) and the label value that marks this test's
// containers, which are removed when the test ends. It skips the test when
// podman or the base image is missing.
func podmanForTest(t *testing.T) (*Podman, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping podman integration test in -short mode")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		skipOrFail(t, "skipping: podman is not installed (run scripts/install-prereqs.sh as root)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: podman integration tests run as root (--userns=auto needs the containers sub-id ranges)")
	}
	if _, err := testIDMap(); err != nil {
		skipOrFail(t, "skipping: %v (scripts/install-prereqs.sh writes it)", err)
	}
	pm := NewPodman(PodmanConfig{ExtraArgs: strings.Fields(os.Getenv("KAT_PODMAN_ARGS"))})
	t.Cleanup(func() { must(t, pm.Close()) }) // last: the cleanup below uses it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok, err := pm.ImageExists(ctx, baseImage)
	if err != nil {
		skipOrFail(t, "skipping: podman does not work here: %v", err)
	}
	if !ok {
		skipOrFail(t, "skipping: image %s is missing (run scripts/build-base-image.sh)", baseImage)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	mark := hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		list, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark})
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		for _, c := range list {
			if err := pm.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, ErrNotFound) {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return pm, mark
}

// testSpec is a spec of the base image labelled for cleanup.
func testSpec(mark, name string, args ...string) ContainerSpec {
	m, _ := testIDMap() // podmanForTest has checked the error
	return ContainerSpec{
		Name:   "kat-rt-test-" + mark + "-" + name,
		Image:  baseImage,
		Args:   args,
		Labels: map[string]string{testLabel: mark, LabelWorkload: name},
		IDMap:  m,
	}
}

// testIDMap is the uid map of the tests' containers: an explicit map, as
// the agent gives every container, from the second-highest slot of the
// containers sub-id range (far from the agent's lowest free ones; the
// highest is TestPodmanExplicitIDMapSharedVolume's). Not --userns=auto:
// podman 4.3.1 can hang when an auto create runs beside the container
// operations of other test binaries.
var testIDMap = sync.OnceValues(func() (*IDMap, error) {
	ids, err := ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	if err != nil {
		return nil, err
	}
	m, _ := ids.Map(int(ids.Slots() - 2))
	return m, nil
})

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	polltest.UntilErr(t, d, what, func() error {
		ok, err := cond()
		if ok {
			return nil
		}
		if err == nil {
			err = errors.New("not yet")
		}
		return err
	})
}

// testContainerPorts is where these tests publish containers' ports: apart
// from the kernel's ephemeral ports, which other tests' servers get, since a
// published port captures every local connection to it.
var testContainerPorts = PortRange{First: 20000, Last: 29999}

func TestPodmanLifecycle(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	port := testContainerPorts.Pick(nil)
	spec := testSpec(mark, "web", "-c", `echo "$GREETING" > /var/www/g.txt && exec httpd -f -p 8080 -h /var/www`)
	spec.Command = []string{"/bin/sh"}
	spec.Env = []EnvVar{{Name: "GREETING", Value: "hello from kat"}}
	spec.Ports = []PortMapping{{HostIP: "127.0.0.1", HostPort: port, ContainerPort: 8080, Protocol: "TCP"}}
	spec.CPUMillis = 500
	spec.MemoryBytes = 64 << 20
	spec.Labels[LabelInstance] = "web-" + mark

	id, err := pm.CreateContainer(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pm.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateCreated || st.ID != id || st.Name != spec.Name || st.Labels[LabelManaged] != "true" || st.Labels[LabelInstance] != "web-"+mark {
		t.Fatalf("after create: %+v", st)
	}
	if _, err := pm.CreateContainer(ctx, spec); !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("second create with the same name: got %v, want ErrAlreadyExists", err)
	}

	if err := pm.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := pm.StartContainer(ctx, id); err != nil {
		t.Fatalf("starting a running container: %v", err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/g.txt", port)
	eventually(t, 20*time.Second, "httpd answers on the published port", func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.TrimSpace(string(body)) == "hello from kat", err
	})
	st, err = pm.InspectContainer(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateRunning || st.Pid <= 0 || st.StartedAt.IsZero() || len(st.Ports) != 1 || st.Ports[0].HostPort != port {
		t.Fatalf("after start: %+v", st)
	}

	list, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark, LabelInstance: "web-" + mark})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != id || list[0].State != StateRunning || list[0].Name != spec.Name ||
		len(list[0].Ports) != 1 || list[0].Ports[0] != (PortMapping{HostIP: "127.0.0.1", HostPort: port, ContainerPort: 8080, Protocol: "tcp"}) {
		t.Fatalf("list by label: %+v", list)
	}
	none, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark, LabelInstance: "other"})
	if err != nil || len(none) != 0 {
		t.Fatalf("list by another instance label: %+v, %v", none, err)
	}

	if err := pm.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := pm.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatalf("stopping a stopped container: %v", err)
	}
	st, err = pm.InspectContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateExited || st.FinishedAt.IsZero() {
		t.Fatalf("after stop: %+v", st)
	}
	if err := pm.RemoveContainer(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	if err := pm.RemoveContainer(ctx, id, true); err != nil {
		t.Fatalf("forced remove of an absent container: %v, want success", err)
	}
	if _, err := pm.InspectContainer(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("inspect after remove: got %v, want ErrNotFound", err)
	}
	for name, err := range map[string]error{
		"start":  pm.StartContainer(ctx, id),
		"stop":   pm.StopContainer(ctx, id, 0),
		"remove": pm.RemoveContainer(ctx, id, false),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of a removed container: got %v, want ErrNotFound", name, err)
		}
	}
}

func TestPodmanExitCodeAndUserNS(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	id, err := pm.CreateContainer(ctx, testSpec(mark, "exit", "sh", "-c", "id -u; cat /proc/self/uid_map; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pm.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	var st *ContainerStatus
	eventually(t, 20*time.Second, "container exits", func() (bool, error) {
		st, err = pm.InspectContainer(ctx, id)
		return err == nil && st.State == StateExited, err
	})
	if st.ExitCode != 3 {
		t.Fatalf("exit code %d, want 3", st.ExitCode)
	}
	rc, err := pm.Logs(ctx, id, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 || lines[0] != "0" {
		t.Fatalf("want uid 0 and a uid map, got %q", out)
	}
	f := strings.Fields(lines[1])
	if len(f) != 3 || f[0] != "0" {
		t.Fatalf("uid_map line %q", lines[1])
	}
	m, _ := testIDMap()
	if want := strconv.FormatInt(m.HostBase, 10); f[1] != want || f[2] != strconv.Itoa(IDMapSize) {
		t.Fatalf("uid_map %q: want container root at host uid %s, %d ids", lines[1], want, IDMapSize)
	}
}

func TestPodmanEvents(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	id, err := pm.CreateContainer(ctx, testSpec(mark, "events", "sh", "-c", "exit 4"))
	if err != nil {
		t.Fatal(err)
	}
	evCtx, stop := context.WithCancel(ctx)
	events := make(chan Event, 64)
	done := make(chan error, 1)
	go func() { done <- pm.Events(evCtx, map[string]string{testLabel: mark}, events) }()
	defer func() {
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Events after cancel: got %v, want context.Canceled", err)
		}
	}()

	// podman events only shows what happens after it subscribed, and
	// nothing says when that is: start the container until both its start
	// and its death are seen.
	seen := map[string]Event{}
	deadline := time.Now().Add(30 * time.Second)
	for seen[ActionStart].ID == "" || seen[ActionDied].ID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no start and died events within 30s; saw %v", seen)
		}
		if err := pm.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(2 * time.Second)
	wait:
		for {
			select {
			case ev := <-events:
				if ev.ID != id || ev.Labels[testLabel] != mark {
					t.Fatalf("event of another container: %+v", ev)
				}
				seen[ev.Action] = ev
				if ev.Action == ActionDied {
					break wait
				}
			case err := <-done:
				t.Fatalf("events stream ended: %v", err)
			case <-timeout:
				break wait
			}
		}
	}
	if d := seen[ActionDied]; d.ExitCode != 4 || d.Time.IsZero() || d.Name == "" {
		t.Fatalf("died event: %+v", d)
	}
}

func TestPodmanLogsFollow(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	id, err := pm.CreateContainer(ctx, testSpec(mark, "logs", "sh", "-c",
		`echo first; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo second >&2; exec sleep 600`))
	if err != nil {
		t.Fatal(err)
	}
	if err := pm.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	lines, stop := followLines(t, ctx, pm, id)
	expect := func(want string) {
		t.Helper()
		select {
		case got, ok := <-lines:
			if !ok || got != want {
				t.Fatalf("log line %q (open %v), want %q", got, ok, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no log line %q within 20s", want)
		}
	}
	expect("first")
	beforeSecond := time.Now()
	if res, err := pm.Exec(ctx, id, []string{"touch", "/tmp/go"}, 10*time.Second); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec touch: %+v %v", res, err)
	}
	expect("second")
	stop()

	for _, tc := range []struct {
		name string
		opts LogOptions
		want string
	}{
		{"tail", LogOptions{Tail: 1}, "second\n"},
		{"since", LogOptions{Since: beforeSecond}, "second\n"},
		{"all", LogOptions{}, "first\nsecond\n"},
	} {
		rc, err := pm.Logs(ctx, id, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil || string(out) != tc.want {
			t.Errorf("logs %s: %q, %v; want %q", tc.name, out, err, tc.want)
		}
	}

	if _, err := pm.Logs(ctx, "kat-rt-test-"+mark+"-absent", LogOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("logs of an absent container: got %v, want ErrNotFound", err)
	}
}

// followLines follows container id's log and sends its lines; stop
// closes the stream and waits for the reader, which then closes lines.
func followLines(t *testing.T, ctx context.Context, pm *Podman, id string) (lines <-chan string, stop func()) {
	t.Helper()
	rc, err := pm.Logs(ctx, id, LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := rc.Close(); err != nil {
				t.Errorf("close the log stream: %v", err)
			}
			for range ch { // the reader ends once the stream is closed
			}
			<-done
		})
	}
	t.Cleanup(stop)
	return ch, stop
}

func TestPodmanExec(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	id, err := pm.CreateContainer(ctx, testSpec(mark, "exec", "sleep", "600"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pm.Exec(ctx, id, []string{"true"}, 5*time.Second); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("exec in a created container: got %v, want ErrNotRunning", err)
	}
	if err := pm.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	res, err := pm.Exec(ctx, id, []string{"sh", "-c", "echo out; echo err >&2; exit 7"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 7 || !strings.Contains(string(res.Output), "out\n") || !strings.Contains(string(res.Output), "err\n") {
		t.Fatalf("exec result %+v (%q)", res, res.Output)
	}
	res, err = pm.Exec(ctx, id, []string{"no-such-command"}, 10*time.Second)
	if err != nil || res.ExitCode != 127 {
		t.Fatalf("exec of a missing command: %+v %v, want exit code 127 and no error", res, err)
	}

	_, err = pm.Exec(ctx, id, []string{"sh", "-c", "sleep 321"}, 500*time.Millisecond)
	if !errors.Is(err, ErrExecTimeout) {
		t.Fatalf("exec past its timeout: got %v, want ErrExecTimeout", err)
	}
	eventually(t, 10*time.Second, "the timed-out command is killed", func() (bool, error) {
		res, err := pm.Exec(ctx, id, []string{"ps", "-o", "args"}, 10*time.Second)
		return err == nil && !strings.Contains(string(res.Output), "sleep 321"), err
	})
}

func TestPodmanRejectsBadSpecs(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name   string
		modify func(*ContainerSpec)
		want   string
	}{
		{"empty image", func(s *ContainerSpec) { s.Image = "" }, "image: is required"},
		{"port out of range", func(s *ContainerSpec) { s.Ports = []PortMapping{{ContainerPort: 70000}} }, "ports[0].containerPort: 70000 is out of range"},
		{"bad protocol", func(s *ContainerSpec) { s.Ports = []PortMapping{{ContainerPort: 80, Protocol: "sctp"}} }, `ports[0].protocol: "sctp"`},
		{"relative mount", func(s *ContainerSpec) { s.Mounts = []Mount{{Source: "data", Target: "/data"}} }, `mounts[0].source: "data" is not an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(mark, "bad", "true")
			tc.modify(&spec)
			_, err := pm.CreateContainer(ctx, spec)
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidSpec with %q", err, tc.want)
			}
			if _, err := pm.InspectContainer(ctx, spec.Name); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a refused spec left a container: %v", err)
			}
		})
	}
	noImage := testSpec(mark, "noimage")
	noImage.Image = "localhost/kat-no-such-image:" + mark
	_, err := pm.CreateContainer(ctx, noImage)
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "podman create") {
		t.Fatalf("create from a missing image: got %v, want ErrImageNotFound naming podman create", err)
	}
}

// TestPodmanSeparateStorage runs a second driver with its own storage root,
// run root and tmpdir, as a second agent on the same machine would: its
// containers and images are invisible to the default storage.
func TestPodmanSeparateStorage(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	// Not t.TempDir: conmon's `podman container cleanup` may still write
	// into the run root after the container is removed, so removing the
	// directory is retried until it holds.
	dir, err := os.MkdirTemp("", "kat-separate-storage-") //nolint:usetesting // see above
	must(t, err)
	t.Cleanup(func() {
		// The REST service exits on SIGTERM without unmounting its
		// storage's overlay home, as a podman that exits beside running
		// containers leaves it: unmount what is left under dir.
		unmountUnder(t, dir)
		polltest.UntilErr(t, 30*time.Second, "remove the separate storage "+dir, func() error { return os.RemoveAll(dir) })
	})
	own := NewPodman(PodmanConfig{Root: dir + "/storage", RunRoot: dir + "/run", TmpDir: dir + "/tmp"})
	t.Cleanup(func() { must(t, own.Close()) })
	if ok, err := own.ImageExists(ctx, baseImage); err != nil || ok {
		t.Fatalf("fresh storage has the base image (%v) or fails: %v", ok, err)
	}
	build := exec.CommandContext(ctx, "bash", "../scripts/build-base-image.sh")
	build.Env = append(os.Environ(), "KAT_PODMAN_ARGS="+strings.Join(own.GlobalArgs(), " "))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the base image into the separate storage: %v: %s", err, out)
	}
	id, err := own.CreateContainer(ctx, testSpec(mark, "own", "sleep", "600"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := own.RemoveContainer(context.Background(), id, true); err != nil {
			t.Error(err)
		}
	})
	must(t, own.StartContainer(ctx, id))
	mine, err := own.ListManagedContainers(ctx, map[string]string{testLabel: mark})
	if err != nil || len(mine) != 1 || mine[0].ID != id || mine[0].State != StateRunning {
		t.Fatalf("separate storage lists %+v, %v", mine, err)
	}
	theirs, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark})
	if err != nil || len(theirs) != 0 {
		t.Fatalf("default storage sees the separate storage's containers: %+v, %v", theirs, err)
	}
}

var skipOrFail = testenv.SkipOrFail

// TestPodmanExplicitIDMapSharedVolume creates two containers with the same
// explicit id map and a shared bind mount with the chown option before
// starting either, as replicas of one workload are: both can write it, and
// container root is the map's base on the host.
func TestPodmanExplicitIDMapSharedVolume(t *testing.T) {
	pm, mark := podmanForTest(t)
	ids, err := ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	if err != nil {
		skipOrFail(t, "skipping: %v (scripts/install-prereqs.sh writes it)", err)
	}
	m, _ := ids.Map(int(ids.Slots() - 1)) // the top slot: far from --userns=auto's
	ctx := testCtx(t)
	dir := t.TempDir()
	var cids []string
	for _, name := range []string{"r1", "r2"} {
		spec := testSpec(mark, "map-"+name, "sh", "-c", "echo "+name+" > /data/"+name+" && cat /proc/self/uid_map")
		spec.IDMap = m
		spec.Mounts = []Mount{{Source: dir, Target: "/data", Chown: true}}
		id, err := pm.CreateContainer(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		cids = append(cids, id)
	}
	for _, id := range cids {
		must(t, pm.StartContainer(ctx, id))
	}
	for i, id := range cids {
		var st *ContainerStatus
		eventually(t, 20*time.Second, "container exits", func() (bool, error) {
			st, err = pm.InspectContainer(ctx, id)
			return err == nil && st.State == StateExited, err
		})
		rc, err := pm.Logs(ctx, id, LogOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st.ExitCode != 0 {
			t.Fatalf("replica %d exited %d: %s", i+1, st.ExitCode, out)
		}
		want := []string{"0", strconv.FormatInt(m.HostBase, 10), strconv.Itoa(IDMapSize)}
		if f := strings.Fields(string(out)); strings.Join(f, " ") != strings.Join(want, " ") {
			t.Fatalf("replica %d uid_map %q, want %q", i+1, out, want)
		}
	}
	for _, name := range []string{"r1", "r2"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("replica %s wrote nothing: %v", name, err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; int64(uid) != m.HostBase {
			t.Fatalf("%s is owned by host uid %d, want %d", name, uid, m.HostBase)
		}
	}
}

// TestPodmanRunAndStopAndRemove: RunContainer creates and starts in one
// step, with the spec's stop timeout; StopAndRemoveContainer removes a
// container that ignores SIGTERM after the given grace (not Podman's 10s
// default), and an absent one is a success.
func TestPodmanRunAndStopAndRemove(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	spec := testSpec(mark, "run", "100000")
	spec.Command = []string{"/bin/sleep"} // PID 1 without a handler: SIGTERM is ignored
	spec.StopTimeout = 3 * time.Second
	id, err := pm.RunContainer(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := pm.InspectContainer(ctx, id)
	if err != nil || st.State != StateRunning || st.StartedAt.IsZero() {
		t.Fatalf("after run: %+v, %v", st, err)
	}
	out, err := pm.run(ctx, "container", "inspect", "--format", "{{.Config.StopTimeout}}", id)
	if err != nil || strings.TrimSpace(string(out)) != "3" {
		t.Errorf("stop timeout %q, %v; want 3", out, err)
	}
	if _, err := pm.RunContainer(ctx, spec); !errors.Is(err, ErrAlreadyExists) {
		t.Errorf("second run with the same name: %v, want ErrAlreadyExists", err)
	}
	if err := pm.StopAndRemoveContainer(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	if exists, err := pm.containerExists(ctx, id); err != nil || exists {
		t.Fatalf("after stop and remove: exists %v, %v", exists, err)
	}
	if err := pm.StopAndRemoveContainer(ctx, id, time.Second); err != nil {
		t.Errorf("stop and remove of an absent container: %v", err)
	}
}

// unmountUnder unmounts every mount point under dir, the deepest first.
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	var points []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", points[i], err)
		}
	}
}
