package runtime

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
)

// fakePodman is a shell script standing in for podman: it records its
// arguments and answers with canned stdout, stderr and exit status, so the
// parsing of podman's edge cases can be tested without podman.
type fakePodman struct {
	dir string
	pm  *Podman
}

func newFakePodman(t *testing.T, cfg PodmanConfig) *fakePodman {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
printf '%s\n' "$@" > "$FAKE_DIR/args"
cat "$FAKE_DIR/stdout" 2>/dev/null
cat "$FAKE_DIR/stderr" >&2 2>/dev/null
exit $(cat "$FAKE_DIR/rc" 2>/dev/null || echo 0)
`
	bin := filepath.Join(dir, "podman")
	must(t, os.WriteFile(bin, []byte(script), 0o755))
	t.Setenv("FAKE_DIR", dir)
	cfg.Binary = bin
	if cfg.AutoUserNSLock == "" {
		cfg.AutoUserNSLock = filepath.Join(dir, "lock", "userns-auto.lock")
	}
	return &fakePodman{dir: dir, pm: NewPodman(cfg)}
}

// answer sets what the next command prints and returns.
func (f *fakePodman) answer(t *testing.T, stdout, stderr string, rc int) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(f.dir, "stdout"), []byte(stdout), 0o644))
	must(t, os.WriteFile(filepath.Join(f.dir, "stderr"), []byte(stderr), 0o644))
	must(t, os.WriteFile(filepath.Join(f.dir, "rc"), []byte(strconv.Itoa(rc)), 0o644))
}

// args returns the arguments of the last command.
func (f *fakePodman) args(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "args"))
	must(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func TestPodmanGlobalArgs(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{Root: "/r", RunRoot: "/rr", NetworkConfigDir: "/n", TmpDir: "/t", ExtraArgs: []string{"--log-level", "error"}})
	f.answer(t, "", "", 0)
	if err := f.pm.StartContainer(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"--root", "/r", "--runroot", "/rr", "--network-config-dir", "/n", "--tmpdir", "/t", "--log-level", "error", "start", "--", "c1"}
	if got := f.args(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("args %q, want %q", got, want)
	}
}

func TestCreateArgs(t *testing.T) {
	pm := NewPodman(PodmanConfig{})
	spec := ContainerSpec{
		Name: "web-1", Image: "localhost/kat-base:latest",
		Command: []string{"/bin/sh", "-c"}, Args: []string{"echo a, b"},
		Env:    []EnvVar{{"B", "2"}, {"A", "x=y"}},
		Labels: map[string]string{LabelWorkload: "web", LabelManaged: "false", "a": ""},
		Ports: []PortMapping{{ContainerPort: 80}, {HostIP: "127.0.0.1", HostPort: 8080, ContainerPort: 80, Protocol: "UDP"},
			{HostIP: "::1", HostPort: 9, ContainerPort: 9}},
		Mounts:    []Mount{{Source: "/s", Target: "/t", ReadOnly: true}, {Source: "/d", Target: "/data", Chown: true}},
		CPUMillis: 1500, MemoryBytes: 64 << 20, Hostname: "web-1", StopTimeout: 1500 * time.Millisecond,
	}
	must(t, spec.Validate())
	got := strings.Join(pm.createArgs(&spec), " | ")
	want := strings.Join([]string{"create", "--name", "web-1", "--pull", "never", "--restart", "no", "--userns", "auto",
		"--label", "kat.managed=true", "--label", "a=", "--label", "kat.workload=web",
		"--env", "B=2", "--env", "A=x=y",
		"--publish", "80:80/tcp", "--publish", "127.0.0.1:8080:80/udp", "--publish", "[::1]:9:9/tcp",
		"--mount", "type=bind,source=/s,destination=/t,ro=true", "--mount", "type=bind,source=/d,destination=/data,U=true",
		"--cpus", "1.5", "--memory", "67108864b", "--hostname", "web-1", "--stop-timeout", "2",
		"--entrypoint", `["/bin/sh","-c"]`, "--", "localhost/kat-base:latest", "echo a, b"}, " | ")
	if got != want {
		t.Fatalf("create args\n got %s\nwant %s", got, want)
	}
	spec.Network, spec.IP = "kat", netip.MustParseAddr("10.100.0.5")
	spec.DNS, spec.DNSSearch, spec.DNSOptions = []netip.Addr{netip.MustParseAddr("10.100.0.1")}, []string{"ns1.kat.local", "kat.local"}, []string{"ndots:2"}
	must(t, spec.Validate())
	if args := strings.Join(pm.createArgs(&spec), " "); !strings.Contains(args, " --hostname web-1 --network kat --ip 10.100.0.5 --dns 10.100.0.1 "+
		"--dns-search ns1.kat.local --dns-search kat.local --dns-option ndots:2 --stop-timeout 2 ") {
		t.Fatalf("network args: %s", args)
	}
	spec.Devices = []string{"amd.com/gpu=1", "nvidia.com/gpu=GPU-4b8c"}
	spec.LogMaxSize = 10 << 20
	must(t, spec.Validate())
	if args := strings.Join(pm.createArgs(&spec), " "); !strings.Contains(args, " --dns-option ndots:2 --device amd.com/gpu=1 --device nvidia.com/gpu=GPU-4b8c "+
		"--log-driver k8s-file --log-opt max-size=10485760 --stop-timeout 2 ") {
		t.Fatalf("device and log args: %s", args)
	}
	spec.UserNS = "host"
	if args := strings.Join(pm.createArgs(&spec), " "); !strings.Contains(args, "--userns host") {
		t.Fatalf("userns not passed: %s", args)
	}
	spec.UserNS = ""
	spec.IDMap = &IDMap{HostBase: 2147483647 + 2*IDMapSize}
	args := strings.Join(pm.createArgs(&spec), " ")
	if !strings.Contains(args, " --restart no --uidmap 0:2147614719:65536 --gidmap 0:2147614719:65536 --label ") ||
		strings.Contains(args, "--userns") {
		t.Fatalf("explicit id map: %s", args)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	ok := ContainerSpec{Name: "a", Image: "i"}
	for _, tc := range []struct {
		name   string
		modify func(*ContainerSpec)
		want   string
	}{
		{"no name", func(s *ContainerSpec) { s.Name = "" }, "name: is required"},
		{"bad name", func(s *ContainerSpec) { s.Name = "a b" }, `name: "a b" is not a valid container name`},
		{"no image", func(s *ContainerSpec) { s.Image = " " }, "image: is required"},
		{"duplicate env", func(s *ContainerSpec) { s.Env = []EnvVar{{"A", "1"}, {"A", "2"}} }, `env[1].name: "A" is set twice`},
		{"bad env name", func(s *ContainerSpec) { s.Env = []EnvVar{{"1A", ""}} }, `env[0].name: "1A"`},
		{"bad label", func(s *ContainerSpec) { s.Labels = map[string]string{"a=b": ""} }, `labels: key "a=b"`},
		{"port zero", func(s *ContainerSpec) { s.Ports = []PortMapping{{}} }, "ports[0].containerPort: 0 is out of range"},
		{"host port", func(s *ContainerSpec) { s.Ports = []PortMapping{{ContainerPort: 1, HostPort: -1}} }, "ports[0].hostPort: -1"},
		{"host ip", func(s *ContainerSpec) { s.Ports = []PortMapping{{ContainerPort: 1, HostIP: "localhost"}} }, `ports[0].hostIP: "localhost" is not an IP address`},
		{"comma in mount", func(s *ContainerSpec) { s.Mounts = []Mount{{Source: "/a,b", Target: "/t"}} }, `mounts[0].source: "/a,b" contains ','`},
		{"double target", func(s *ContainerSpec) {
			s.Mounts = []Mount{{Source: "/a", Target: "/t"}, {Source: "/b", Target: "/t/"}}
		}, `mounts[1].target: "/t/" is mounted twice`},
		{"tiny memory", func(s *ContainerSpec) { s.MemoryBytes = 1024 }, "memoryBytes: 1024 is below podman's minimum"},
		{"negative cpu", func(s *ContainerSpec) { s.CPUMillis = -1 }, "cpuMillis: -1 is negative"},
		{"negative log size", func(s *ContainerSpec) { s.LogMaxSize = -1 }, "logMaxSize: -1 is negative"},
		{"map to host root", func(s *ContainerSpec) { s.IDMap = &IDMap{} }, "idMap.hostBase: 0 is not above 0"},
		{"map and userns", func(s *ContainerSpec) { s.IDMap, s.UserNS = &IDMap{HostBase: 1}, "auto" }, `idMap: is set together with userNS "auto"`},
		{"bad network", func(s *ContainerSpec) { s.Network = "-kat" }, `network: "-kat" is not a valid network name`},
		{"ip without network", func(s *ContainerSpec) { s.IP = netip.MustParseAddr("10.1.0.2") }, "ip: 10.1.0.2 is set without a network"},
		{"ipv6 ip", func(s *ContainerSpec) { s.Network, s.IP = "kat", netip.MustParseAddr("fd00::2") }, "ip: fd00::2 is not a unicast IPv4"},
		{"no nameserver", func(s *ContainerSpec) { s.DNS = []netip.Addr{{}} }, "dns[0]: invalid IP is not a nameserver address"},
		{"bad search domain", func(s *ContainerSpec) { s.DNSSearch = []string{"ns1.kat", "a b"} }, `dnsSearch[1]: "a b" is not a domain name`},
		{"bad dns option", func(s *ContainerSpec) { s.DNSOptions = []string{"ndots 2"} }, `dnsOptions[0]: "ndots 2" is not a resolv.conf option`},
		{"device path", func(s *ContainerSpec) { s.Devices = []string{"/dev/dri/renderD128"} }, `devices[0]: "/dev/dri/renderD128" is not a CDI device name`},
		{"device without a name", func(s *ContainerSpec) { s.Devices = []string{"amd.com/gpu=0", "amd.com/gpu"} }, `devices[1]: "amd.com/gpu" is not a CDI device name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.modify(&s)
			err := s.Validate()
			if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrInvalidSpec with %q", err, tc.want)
			}
		})
	}
}

func TestCommandErrors(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		stderr   string
		rc       int
		call     func() error
		sentinel error
		want     string
	}{
		{"inspect of an absent container", `Error: no such object: "x"`, 125,
			func() error { _, err := f.pm.InspectContainer(ctx, "x"); return err }, ErrNotFound,
			`inspect container x: podman container inspect --format json -- x: Error: no such object: "x"`},
		{"stop of an absent container", `Error: no container with name or ID "x" found: no such container`, 125,
			func() error { return f.pm.StopContainer(ctx, "x", 1500*time.Millisecond) }, ErrNotFound,
			"podman stop --time 2 -- x: Error: no container"},
		{"name taken", `Error: creating container storage: the container name "a" is already in use by 1f3. You have to remove that container to be able to reuse that name: that name is already in use`, 125,
			func() error {
				_, err := f.pm.CreateContainer(ctx, ContainerSpec{Name: "a", Image: "i", Env: []EnvVar{{"TOKEN", "s3cret"}}})
				return err
			}, ErrAlreadyExists, "--env TOKEN=<redacted>"},
		{"missing image", "Error: localhost/x: image not known", 125,
			func() error { return f.pm.RemoveImage(ctx, "localhost/x") }, ErrImageNotFound, "podman rmi -- localhost/x: Error: localhost/x: image not known"},
		{"port conflict is no name conflict", "Error: rootlessport listen tcp 0.0.0.0:80: bind: address already in use", 126,
			func() error { return f.pm.StartContainer(ctx, "a") }, nil, "address already in use"},
		{"device no cdi spec defines", "Error: setting up CDI devices: unresolvable CDI devices amd.com/gpu=7", 126,
			func() error {
				_, err := f.pm.RunContainer(ctx, ContainerSpec{Name: "a", Image: "i", Devices: []string{"amd.com/gpu=7"}})
				return err
			},
			ErrDeviceUnavailable, "unresolvable CDI devices amd.com/gpu=7"},
		{"exec in a stopped container", "Error: can only create exec sessions on running containers: container state improper", 255,
			func() error { _, err := f.pm.Exec(ctx, "a", []string{"true"}, time.Second); return err }, ErrNotRunning, "podman exec --env KAT_EXEC_TOKEN=<redacted> -- a true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.answer(t, "", tc.stderr+"\n\n", tc.rc)
			err := tc.call()
			var ce *CommandError
			if !errors.As(err, &ce) || ce.ExitCode != tc.rc || ce.Stderr != tc.stderr {
				t.Fatalf("got %#v, want a *CommandError with exit code %d and the trimmed stderr", err, tc.rc)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want it to wrap %v", err, tc.sentinel)
			}
			for _, s := range []error{ErrNotFound, ErrAlreadyExists, ErrImageNotFound, ErrNotRunning} {
				if !errors.Is(tc.sentinel, s) && errors.Is(err, s) {
					t.Fatalf("%v wrongly wraps %v", err, s)
				}
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error %q: want it to contain %q and no secret", err, tc.want)
			}
		})
	}
}

func TestExecResultFromExitCode(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	// A command that exits 255 on its own is a result, not a podman error.
	f.answer(t, "partial output\n", "its own complaint\n", 255)
	res, err := f.pm.Exec(context.Background(), "a", []string{"x"}, 0)
	if err != nil || res.ExitCode != 255 || string(res.Output) != "partial output\nits own complaint\n" {
		t.Fatalf("got %+v (%q), %v", res, res.Output, err)
	}
	f.answer(t, strings.Repeat("x", MaxExecOutput+10), "", 0)
	res, err = f.pm.Exec(context.Background(), "a", []string{"x"}, 0)
	if err != nil || len(res.Output) != MaxExecOutput || !res.Truncated {
		t.Fatalf("long output: %d bytes, truncated %v, %v", len(res.Output), res.Truncated, err)
	}
}

func TestParsePS(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want []ContainerStatus
	}{
		{"empty", "", nil},
		{"null", "null\n", nil},
		{"empty list", "[]", []ContainerStatus{}},
		{"podman 4.3 exited, null labels, port range", `[{"Id":"abc","Names":["web-1"],"Image":"localhost/kat-base:latest","ImageID":"d0b",
			"Labels":null,"State":"exited","ExitCode":137,"Exited":true,"ExitedAt":1795403232,"StartedAt":1795403228,"Created":1795403227,"Pid":0,
			"Ports":[{"host_ip":"","container_port":80,"host_port":8080,"range":2,"protocol":"tcp"}]}]`,
			[]ContainerStatus{{ID: "abc", Name: "web-1", Image: "localhost/kat-base:latest", ImageID: "d0b", Labels: map[string]string{},
				State: StateExited, RawState: "exited", ExitCode: 137,
				CreatedAt: time.Unix(1795403227, 0).UTC(), StartedAt: time.Unix(1795403228, 0).UTC(), FinishedAt: time.Unix(1795403232, 0).UTC(),
				Ports: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 8081, ContainerPort: 81, Protocol: "tcp"}}}}},
		{"never started, string Created, odd state", `[{"Id":"def","Names":[],"Labels":{"kat.managed":"true"},"State":"configured",
			"ExitedAt":-62135596800,"StartedAt":-62135596800,"Created":"2026-11-23T03:07:08Z"}]`,
			[]ContainerStatus{{ID: "def", Labels: map[string]string{LabelManaged: "true"}, State: StateCreated, RawState: "configured",
				CreatedAt: time.Date(2026, 11, 23, 3, 7, 8, 0, time.UTC)}}},
		{"unknown state", `[{"Id":"x","State":"removing"}]`,
			[]ContainerStatus{{ID: "x", Labels: map[string]string{}, State: StateUnknown, RawState: "removing"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePS([]byte(tc.out))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := parsePS([]byte("Error: boom")); err == nil || !strings.Contains(err.Error(), "parse podman ps output") {
		t.Fatalf("garbage: %v", err)
	}
}

func TestListManagedContainersFiltersAgain(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	f.answer(t, `[{"Id":"a","Labels":{"kat.managed":"true","kat.node":"n1"},"State":"running"},
		{"Id":"b","Labels":{"kat.managed":"true","kat.node":"n2"},"State":"running"},
		{"Id":"c","Labels":{"kat.node":"n1"},"State":"running"}]`, "", 0)
	list, err := f.pm.ListManagedContainers(context.Background(), map[string]string{LabelNode: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "a" {
		t.Fatalf("got %+v, want only a", list)
	}
	want := []string{"ps", "--all", "--no-trunc", "--format", "json", "--filter", "label=kat.managed=true", "--filter", "label=kat.node=n1"}
	if got := f.args(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("args %q, want %q", got, want)
	}
}

func TestParseInspect(t *testing.T) {
	out := `[{"Id":"abc","Created":"2026-11-23T03:07:08.10400639Z","Name":"web-1","Image":"d0b","ImageName":"localhost/kat-base:latest",
	"RestartCount":2,"State":{"Status":"running","Running":true,"OOMKilled":true,"Pid":16671,"ExitCode":0,
	"StartedAt":"2026-11-23T03:07:08.556114174Z","FinishedAt":"0001-01-01T00:00:00Z"},
	"Config":{"Labels":null},"NetworkSettings":{"Ports":{"8080/tcp":[{"HostIp":"127.0.0.1","HostPort":"18431"}],"53/udp":null}}}]`
	got, err := parseInspect([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := &ContainerStatus{ID: "abc", Name: "web-1", Image: "localhost/kat-base:latest", ImageID: "d0b", Labels: map[string]string{},
		State: StateRunning, RawState: "running", OOMKilled: true, Pid: 16671, RestartCount: 2,
		CreatedAt: time.Date(2026, 11, 23, 3, 7, 8, 104006390, time.UTC), StartedAt: time.Date(2026, 11, 23, 3, 7, 8, 556114174, time.UTC),
		Ports: []PortMapping{{HostIP: "127.0.0.1", HostPort: 18431, ContainerPort: 8080, Protocol: "tcp"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %+v\nwant %+v", got, want)
	}
	if _, err := parseInspect([]byte("[]")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty inspect: %v", err)
	}
}

func TestEventsFromFakePodman(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	f.answer(t, `{"ID":"a","Image":"i","Name":"web-1","Status":"start","Time":"2026-11-23T03:07:15.32415779Z","Type":"container","Attributes":{"kat.managed":"true","kat.node":"n1"}}
{"ID":"b","Name":"other","Status":"start","Time":"2026-11-23T03:07:15Z","Attributes":{"kat.managed":"true","kat.node":"n2"}}
{"ContainerExitCode":3,"ID":"a","Name":"web-1","Status":"died","Time":1795403235,"Attributes":{"kat.managed":"true","kat.node":"n1"}}
`, "", 0)
	out := make(chan Event, 10)
	err := f.pm.Events(context.Background(), map[string]string{LabelNode: "n1"}, out)
	// The fake ends its stream, which a real podman never does.
	if err == nil || !strings.Contains(err.Error(), "podman events ended unexpectedly") {
		t.Fatalf("end of stream: %v", err)
	}
	close(out)
	var got []Event
	for ev := range out {
		got = append(got, ev)
	}
	labels := map[string]string{LabelManaged: "true", LabelNode: "n1"}
	want := []Event{
		{ID: "a", Name: "web-1", Image: "i", Action: ActionStart, Labels: labels, Time: time.Date(2026, 11, 23, 3, 7, 15, 324157790, time.UTC)},
		{ID: "a", Name: "web-1", Action: ActionDied, Labels: labels, ExitCode: 3, Time: time.Unix(1795403235, 0).UTC()},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %+v\nwant %+v", got, want)
	}

	f.answer(t, "not json\n", "", 0)
	err = f.pm.Events(context.Background(), nil, make(chan Event, 1))
	if err == nil || !strings.Contains(err.Error(), `parse podman event "not json"`) {
		t.Fatalf("garbage event: %v", err)
	}
}

// TestAutoUserNSCreatesRunOneAtATime checks that no two `podman create
// --userns auto` run at once (podman 4.3.1 can deadlock then), whether they
// come from one driver or from two (as from two processes): the fake fails
// when it finds another create running.
func TestAutoUserNSCreatesRunOneAtATime(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	script := `#!/bin/sh
mkdir "$FAKE_DIR/busy" 2>/dev/null || { echo "Error: two creates at once" >&2; exit 125; }
sleep 0.05
rmdir "$FAKE_DIR/busy"
echo 0123abcd
`
	must(t, os.WriteFile(f.pm.cfg.Binary, []byte(script), 0o755))
	other := NewPodman(f.pm.Config()) // another driver: its own queue, the same lock file
	ctx := context.Background()
	errs := make(chan error, 6)
	for i := range cap(errs) {
		pm := f.pm
		if i%2 == 1 {
			pm = other
		}
		go func() {
			_, err := pm.CreateContainer(ctx, ContainerSpec{Name: "c" + strconv.Itoa(i), Image: "i"})
			errs <- err
		}()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestAutoUserNSLockHeldByAnotherProcess: while another process holds the
// lock file, an auto create waits (and gives up when its context ends,
// saying on what), a create with an explicit map does not, and the waiter
// goes on once that process is killed.
func TestAutoUserNSLockHeldByAnotherProcess(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) (util-linux) is not installed")
	}
	f := newFakePodman(t, PodmanConfig{})
	f.answer(t, "0123abcd\n", "", 0)
	lock := f.pm.Config().AutoUserNSLock
	must(t, os.MkdirAll(filepath.Dir(lock), 0o755))
	holder := exec.Command(flock, "--close", lock, "sh", "-c", "echo held; exec sleep 60")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so that its sleep dies with it
	out, err := holder.StdoutPipe()
	must(t, err)
	must(t, holder.Start())
	t.Cleanup(func() { _ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); _ = holder.Wait() })
	if _, err := out.Read(make([]byte, 5)); err != nil {
		t.Fatalf("flock holder: %v", err)
	}

	ctx := context.Background()
	if _, err := f.pm.CreateContainer(ctx, ContainerSpec{Name: "mapped", Image: "i", IDMap: &IDMap{HostBase: 100000}}); err != nil {
		t.Fatalf("explicit-map create while another process holds the lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = f.pm.CreateContainer(short, ContainerSpec{Name: "late", Image: "i"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), lock) {
		t.Fatalf("auto create past its deadline: got %v, want a deadline error naming %s", err, lock)
	}

	done := make(chan error, 1)
	go func() {
		_, err := f.pm.CreateContainer(ctx, ContainerSpec{Name: "waiter", Image: "i"})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("auto create ran while the lock was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	must(t, holder.Process.Kill())
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("auto create after the holder died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("auto create still waiting 10s after the lock holder was killed")
	}
}

// TestCancelAsksPodmanToStop: an ended context sends podman SIGTERM (it
// cleans up what it started) before WaitDelay's kill.
func TestCancelAsksPodmanToStop(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{WaitDelay: 10 * time.Second})
	script := `#!/bin/sh
trap 'echo term > "$FAKE_DIR/signal"; exit 143' TERM
echo started > "$FAKE_DIR/started"
while :; do sleep 0.01; done
`
	must(t, os.WriteFile(f.pm.cfg.Binary, []byte(script), 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.pm.StartContainer(ctx, "c1") }()
	polltest.Until(t, 10*time.Second, "podman starts", func() bool {
		_, err := os.Stat(filepath.Join(f.dir, "started"))
		return err == nil
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled start: %v, want context.Canceled", err)
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, "signal")); err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Fatalf("podman got no SIGTERM (%q, %v): it was killed", b, err)
	}
}
