package runtime

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestMain lets this test binary stand in for `podman system service` (see
// fakePodman) when the fake podman runs it so.
func TestMain(m *testing.M) {
	if os.Getenv(fakeServiceEnv) == "1" {
		fakeServiceMain(os.Args[len(os.Args)-1])
		return
	}
	os.Exit(m.Run())
}

// fakeServiceEnv makes this test binary the fake service.
const fakeServiceEnv = "KAT_FAKE_PODMAN_SERVICE"

// fakePodman is a shell script standing in for podman: `podman system
// service` runs this test binary as the service, which records every
// request and answers with the canned answers the test set (route). So the
// driver's requests and its reading of podman's edge cases are tested
// without podman.
type fakePodman struct {
	dir string
	pm  *Podman
}

func newFakePodman(t *testing.T, cfg PodmanConfig) *fakePodman {
	t.Helper()
	dir := t.TempDir()
	exe, err := os.Executable()
	must(t, err)
	script := `#!/bin/sh
for a; do last=$a; done
case "$last" in unix://*)
	printf '%s\n' "$@" >> "$FAKE_DIR/service-args"
	` + fakeServiceEnv + `=1 exec "$FAKE_SERVER" "$last" ;;
esac
if [ -f "$FAKE_DIR/rc" ]; then # a command's canned answer (answer)
	printf '%s\n' "$@" > "$FAKE_DIR/args"
	cat "$FAKE_DIR/stdout" 2>/dev/null
	cat "$FAKE_DIR/stderr" >&2 2>/dev/null
	exit $(cat "$FAKE_DIR/rc")
fi
echo "Error: the fake podman runs only the service" >&2
exit 125
`
	bin := filepath.Join(dir, "podman")
	must(t, os.WriteFile(bin, []byte(script), 0o755))
	t.Setenv("FAKE_DIR", dir)
	t.Setenv("FAKE_SERVER", exe)
	cfg.Binary = bin
	if cfg.AutoUserNSLock == "" {
		cfg.AutoUserNSLock = filepath.Join(dir, "lock", "userns-auto.lock")
	}
	f := &fakePodman{dir: dir, pm: NewPodman(cfg)}
	t.Cleanup(func() { must(t, f.pm.Close()) })
	return f
}

// answer sets what the commands the driver still runs as podman processes
// (stop, rm, exec) print and return.
func (f *fakePodman) answer(t *testing.T, stdout, stderr string, rc int) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(f.dir, "stdout"), []byte(stdout), 0o644))
	must(t, os.WriteFile(filepath.Join(f.dir, "stderr"), []byte(stderr), 0o644))
	must(t, os.WriteFile(filepath.Join(f.dir, "rc"), []byte(strconv.Itoa(rc)), 0o644))
}

// args returns the arguments of the last command answer answered.
func (f *fakePodman) args(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "args"))
	must(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// fakeRoute is one canned answer of the fake service: to requests of
// Method whose path (without the API prefix) is Path, or starts with it
// when it ends in "*".
type fakeRoute struct {
	Method, Path string
	Status       int
	// Body is the answer; Frames, when set, are stdout (1) and stderr (2)
	// payloads sent as the service's framed stream instead.
	Body   string
	Frames []fakeFrame
	// Exclusive makes the route fail when another request of it (from
	// any fake service) is being answered, and take 50ms.
	Exclusive bool
}

type fakeFrame struct {
	Stream byte
	Data   string
}

// route adds a canned answer; the last route that matches answers.
func (f *fakePodman) route(t *testing.T, r fakeRoute) {
	t.Helper()
	var rs []fakeRoute
	if b, err := os.ReadFile(filepath.Join(f.dir, "routes.json")); err == nil {
		must(t, json.Unmarshal(b, &rs))
	}
	b, err := json.Marshal(append(rs, r))
	must(t, err)
	tmp := filepath.Join(f.dir, "routes.json.tmp")
	must(t, os.WriteFile(tmp, b, 0o644))
	must(t, os.Rename(tmp, filepath.Join(f.dir, "routes.json")))
}

// fakeRequest is a request the fake service got.
type fakeRequest struct {
	Method, Path string
	Query        url.Values
	Body         json.RawMessage
	Header       http.Header
}

// requests returns the requests the fake services got, in order.
func (f *fakePodman) requests(t *testing.T) []fakeRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "requests"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	must(t, err)
	var out []fakeRequest
	for line := range strings.Lines(string(b)) {
		var r fakeRequest
		must(t, json.Unmarshal([]byte(line), &r))
		out = append(out, r)
	}
	return out
}

// last returns the last request to a path, failing when there was none.
func (f *fakePodman) last(t *testing.T, method, path string) fakeRequest {
	t.Helper()
	rs := f.requests(t)
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Method == method && rs[i].Path == path {
			return rs[i]
		}
	}
	t.Fatalf("no %s %s among the requests %+v", method, path, rs)
	return fakeRequest{}
}

// fakeServiceMain serves the fake service on addr (unix://PATH) until it
// is killed.
func fakeServiceMain(addr string) {
	dir := os.Getenv("FAKE_DIR")
	l, err := net.Listen("unix", strings.TrimPrefix(addr, "unix://"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(125)
	}
	var mu sync.Mutex
	_ = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		path := strings.TrimPrefix(r.URL.EscapedPath(), apiPrefix)
		rec := fakeRequest{Method: r.Method, Path: path, Query: r.URL.Query(), Header: r.Header}
		if json.Valid(body) {
			rec.Body = body
		}
		line, _ := json.Marshal(rec)
		mu.Lock()
		if f, err := os.OpenFile(filepath.Join(dir, "requests"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.Write(append(line, '\n'))
			_ = f.Close()
		}
		mu.Unlock()
		var rs []fakeRoute
		if b, err := os.ReadFile(filepath.Join(dir, "routes.json")); err == nil {
			_ = json.Unmarshal(b, &rs)
		}
		for i := len(rs) - 1; i >= 0; i-- {
			rt := rs[i]
			prefix, wild := strings.CutSuffix(rt.Path, "*")
			matches := path == rt.Path || (wild && strings.HasPrefix(path, prefix))
			if rt.Method != r.Method || !matches {
				continue
			}
			if rt.Exclusive {
				busy := filepath.Join(dir, "busy")
				if os.Mkdir(busy, 0o755) != nil {
					w.WriteHeader(http.StatusInternalServerError)
					_, _ = io.WriteString(w, `{"message":"two at once"}`)
					return
				}
				time.Sleep(50 * time.Millisecond) //nolint:forbidigo // the fake holds the route, as a slow podman would
				_ = os.Remove(busy)
			}
			w.WriteHeader(rt.Status)
			_, _ = io.WriteString(w, rt.Body)
			for _, fr := range rt.Frames {
				hdr := make([]byte, 8)
				hdr[0] = fr.Stream
				hdr[4], hdr[5], hdr[6], hdr[7] = byte(len(fr.Data)>>24), byte(len(fr.Data)>>16), byte(len(fr.Data)>>8), byte(len(fr.Data))
				_, _ = w.Write(append(hdr, fr.Data...))
			}
			return
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprintf(w, `{"message":"fake: no route for %s %s"}`, r.Method, path)
	}))
}

// TestPodmanServiceArgs: the driver starts its service with the global
// arguments of its configuration, on a socket of its own, and idles out
// only after serviceIdle.
func TestPodmanServiceArgs(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{Root: "/r", RunRoot: "/rr", NetworkConfigDir: "/n", TmpDir: "/t", ExtraArgs: []string{"--log-level", "error"}})
	f.route(t, fakeRoute{Method: http.MethodPost, Path: "/containers/c1/start", Status: http.StatusNoContent})
	if err := f.pm.StartContainer(context.Background(), "c1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "service-args"))
	must(t, err)
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	want := []string{"--root", "/r", "--runroot", "/rr", "--network-config-dir", "/n", "--tmpdir", "/t", "--log-level", "error",
		"system", "service", "--time", "60", "unix://" + f.pm.svc.socket()}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("service args %q, want %q", got, want)
	}
	if r := f.last(t, http.MethodPost, "/containers/c1/start"); len(r.Query) != 0 {
		t.Fatalf("start request %+v", r)
	}
}

// TestCreateSpec: a spec becomes the container spec `podman create` with
// the corresponding flags sends (captured from podman 4.3.1's remote
// client): the same container as the CLI would make.
func TestCreateSpec(t *testing.T) {
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
	render := func() map[string]any {
		b, err := json.Marshal(pm.createSpec(&spec))
		must(t, err)
		var m map[string]any
		must(t, json.Unmarshal(b, &m))
		return m
	}
	want := `{"annotations":{"io.kubernetes.cri-o.TTY":"false"},"cgroups_mode":"enabled","command":["echo a, b"],` +
		`"entrypoint":["/bin/sh","-c"],"env":{"A":"x=y","B":"2"},"hostname":"web-1","httpproxy":true,` +
		`"idmappings":{"AutoUserNs":true,"GIDMap":null,"UIDMap":null},"image":"localhost/kat-base:latest",` +
		`"image_volume_mode":"anonymous","labels":{"a":"","kat.managed":"true","kat.workload":"web"},"manage_password":true,` +
		`"mounts":[{"destination":"/t","options":["ro"],"source":"/s","type":"bind"},{"destination":"/data","options":["U"],"source":"/d","type":"bind"}],` +
		`"name":"web-1","portmappings":[{"container_port":80,"host_port":80,"protocol":"tcp","range":1},` +
		`{"container_port":80,"host_ip":"127.0.0.1","host_port":8080,"protocol":"udp","range":1},` +
		`{"container_port":9,"host_ip":"::1","host_port":9,"protocol":"tcp","range":1}],"raw_image_name":"localhost/kat-base:latest",` +
		`"resource_limits":{"cpu":{"period":100000,"quota":150000},"memory":{"limit":67108864,"swap":134217728}},` +
		`"restart_policy":"no","sdnotifyMode":"container","seccomp_policy":"default","stop_timeout":2,"systemd":"true",` +
		`"umask":"0022","use_image_hosts":false,"userns":{"nsmode":"auto"}}`
	if got, _ := json.Marshal(render()); string(got) != want {
		t.Fatalf("container spec\n got %s\nwant %s", got, want)
	}
	spec.Network, spec.IP = "kat", netip.MustParseAddr("10.100.0.5")
	spec.DNS, spec.DNSSearch, spec.DNSOptions = []netip.Addr{netip.MustParseAddr("10.100.0.1")}, []string{"ns1.kat.local", "kat.local"}, []string{"ndots:2"}
	spec.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "0"}
	must(t, spec.Validate())
	m := render()
	for k, v := range map[string]string{"netns": `{"nsmode":"bridge"}`, "Networks": `{"kat":{"static_ips":["10.100.0.5"]}}`,
		"dns_server": `["10.100.0.1"]`, "dns_search": `["ns1.kat.local","kat.local"]`, "dns_option": `["ndots:2"]`,
		"sysctl": `{"net.ipv4.ip_unprivileged_port_start":"0"}`} {
		if got, _ := json.Marshal(m[k]); string(got) != v {
			t.Errorf("%s: %s, want %s", k, got, v)
		}
	}
	spec.Devices = []string{"amd.com/gpu=1", "nvidia.com/gpu=GPU-4b8c"}
	spec.LogMaxSize = 10 << 20
	must(t, spec.Validate())
	m = render()
	for k, v := range map[string]string{"devices": `[{"path":"amd.com/gpu=1"},{"path":"nvidia.com/gpu=GPU-4b8c"}]`,
		"log_configuration": `{"driver":"k8s-file","size":10485760}`} {
		if got, _ := json.Marshal(m[k]); string(got) != v {
			t.Errorf("%s: %s, want %s", k, got, v)
		}
	}
	spec.UserNS = "host"
	if got, _ := json.Marshal(render()["userns"]); string(got) != `{"nsmode":"host"}` || render()["idmappings"] != nil {
		t.Fatalf("userns not passed: %s", got)
	}
	spec.UserNS = ""
	spec.IDMap = &IDMap{HostBase: 2147483647 + 2*IDMapSize}
	m = render()
	ns, _ := json.Marshal(m["userns"])
	ids, _ := json.Marshal(m["idmappings"])
	wantIDs := `{"AutoUserNs":false,"GIDMap":[{"container_id":0,"host_id":2147614719,"size":65536}],"UIDMap":[{"container_id":0,"host_id":2147614719,"size":65536}]}`
	if string(ns) != `{"nsmode":"private"}` || string(ids) != wantIDs {
		t.Fatalf("explicit id map: userns %s, idmappings %s", ns, ids)
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
		{"host sysctl", func(s *ContainerSpec) { s.Sysctls = map[string]string{"kernel.pid_max": "1"} }, `sysctls: key "kernel.pid_max" is not a net. key`},
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

// TestAPIErrors: the service's error answers become *APIErrors that name the
// podman command, keep podman's message and wrap the matching sentinel,
// never another, and no secret of the request.
func TestAPIErrors(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		route    fakeRoute
		msg      string
		call     func() error
		sentinel error
		want     string
	}{
		{"inspect of an absent container", fakeRoute{Method: http.MethodGet, Path: "/containers/x/json", Status: 404}, `no container with name or ID "x" found: no such container`,
			func() error { _, err := f.pm.InspectContainer(ctx, "x"); return err }, ErrNotFound,
			`inspect container x: podman container inspect x: no container with name or ID "x" found: no such container`},
		{"start of an absent container", fakeRoute{Method: http.MethodPost, Path: "/containers/x/start", Status: 404}, `no container with name or ID "x" found: no such container`,
			func() error { return f.pm.StartContainer(ctx, "x") }, ErrNotFound,
			"start container x: podman start x: no container"},
		{"name taken", fakeRoute{Method: http.MethodPost, Path: "/containers/create", Status: 500}, `creating container storage: the container name "a" is already in use by 1f3. You have to remove that container to be able to reuse that name: that name is already in use`,
			func() error {
				_, err := f.pm.CreateContainer(ctx, ContainerSpec{Name: "a", Image: "i", Env: []EnvVar{{"TOKEN", "s3cret"}}})
				return err
			}, ErrAlreadyExists, "create container a: podman create: creating container storage"},
		{"missing image", fakeRoute{Method: http.MethodDelete, Path: "/images/localhost%2Fx", Status: 404}, "localhost/x: image not known",
			func() error { return f.pm.RemoveImage(ctx, "localhost/x") }, ErrImageNotFound, "podman rmi localhost/x: localhost/x: image not known"},
		{"image in use", fakeRoute{Method: http.MethodDelete, Path: "/images/localhost%2Fy", Status: 409}, "image used by 1f3: image is in use by a container",
			func() error { return f.pm.RemoveImage(ctx, "localhost/y") }, ErrInUse, "image is in use"},
		{"port conflict is no name conflict", fakeRoute{Method: http.MethodPost, Path: "/containers/a/start", Status: 500}, "rootlessport listen tcp 0.0.0.0:80: bind: address already in use",
			func() error { return f.pm.StartContainer(ctx, "a") }, ErrHostPortInUse, "address already in use"},
		{"host port taken", fakeRoute{Method: http.MethodPost, Path: "/containers/b/start", Status: 500}, "cannot listen on the TCP port: listen tcp4 :8080: bind: address already in use",
			func() error { return f.pm.StartContainer(ctx, "b") }, ErrHostPortInUse, "start container b: podman start b: cannot listen on the TCP port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.route.Body = fmt.Sprintf(`{"cause":"x","message":%q,"response":%d}`, tc.msg, tc.route.Status)
			f.route(t, tc.route)
			err := tc.call()
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != tc.route.Status || ae.Message != tc.msg {
				t.Fatalf("got %#v, want an *APIError with status %d and the message", err, tc.route.Status)
			}
			if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
				t.Fatalf("got %v, want it to wrap %v", err, tc.sentinel)
			}
			for _, s := range []error{ErrNotFound, ErrAlreadyExists, ErrImageNotFound, ErrNotRunning, ErrInUse, ErrHostPortInUse} {
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

// TestCommandErrors: the commands the driver still runs as podman
// processes (stop, exec) fail with *CommandErrors that carry podman's exit
// code and trimmed stderr and wrap the matching sentinel, never another,
// and name the command without a secret.
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
		{"stop of an absent container", `Error: no container with name or ID "x" found: no such container`, 125,
			func() error { return f.pm.StopContainer(ctx, "x", 1500*time.Millisecond) }, ErrNotFound,
			"podman stop --time 2 -- x: Error: no container"},
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
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q: want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestExecResultFromExitCode: a command's output (stdout and stderr in the
// order written) and its exit code, 255 included, are its result, not an
// error; output past MaxExecOutput is dropped and marked.
func TestExecResultFromExitCode(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	// A command that exits 255 on its own is a result, not a podman error.
	f.answer(t, "partial output\n", "its own complaint\n", 255)
	res, err := f.pm.Exec(context.Background(), "a", []string{"x", "y z"}, 0)
	if err != nil || res.ExitCode != 255 || string(res.Output) != "partial output\nits own complaint\n" {
		t.Fatalf("got %+v (%q), %v", res, res.Output, err)
	}
	if args := f.args(t); len(args) != 7 || args[0] != "exec" || !strings.HasPrefix(args[2], execTokenVar+"=") ||
		!slices.Equal(args[3:], []string{"--", "a", "x", "y z"}) {
		t.Fatalf("podman %q", args)
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
	f.route(t, fakeRoute{Method: http.MethodGet, Path: "/containers/json", Status: 200,
		Body: `[{"Id":"a","Labels":{"kat.managed":"true","kat.node":"n1"},"State":"running","Created":"2026-11-23T03:07:08.104006390Z"},
		{"Id":"b","Labels":{"kat.managed":"true","kat.node":"n2"},"State":"running"},
		{"Id":"c","Labels":{"kat.node":"n1"},"State":"running"}]`})
	list, err := f.pm.ListManagedContainers(context.Background(), map[string]string{LabelNode: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "a" || !list[0].CreatedAt.Equal(time.Date(2026, 11, 23, 3, 7, 8, 104006390, time.UTC)) {
		t.Fatalf("got %+v, want only a, created to the nanosecond", list)
	}
	q := f.last(t, http.MethodGet, "/containers/json").Query
	if q.Get("all") != "true" || q.Get("filters") != `{"label":["kat.managed=true","kat.node=n1"]}` {
		t.Fatalf("query %v", q)
	}
}

func TestParseInspect(t *testing.T) {
	out := `{"Id":"abc","Created":"2026-11-23T03:07:08.10400639Z","Name":"web-1","Image":"d0b","ImageName":"localhost/kat-base:latest",
	"RestartCount":2,"State":{"Status":"running","Running":true,"OOMKilled":true,"Pid":16671,"ExitCode":0,
	"StartedAt":"2026-11-23T03:07:08.556114174Z","FinishedAt":"0001-01-01T00:00:00Z"},
	"Config":{"Labels":null},"NetworkSettings":{"Ports":{"8080/tcp":[{"HostIp":"127.0.0.1","HostPort":"18431"}],"53/udp":null}}}`
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
	if _, err := parseInspect([]byte("{}")); err == nil || !strings.Contains(err.Error(), "no container ID") {
		t.Fatalf("empty inspect: %v", err)
	}
}

func TestEventsFromFakePodman(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	f.route(t, fakeRoute{Method: http.MethodGet, Path: "/events", Status: 200, Body: `{"status":"start","id":"a","from":"i","Type":"container","Action":"start","Actor":{"ID":"a","Attributes":{"containerExitCode":"0","image":"i","kat.managed":"true","kat.node":"n1","name":"web-1","podId":""}},"scope":"local","time":1795403235,"timeNano":1795403235324157790}
{"status":"start","id":"b","Type":"container","Action":"start","Actor":{"ID":"b","Attributes":{"kat.managed":"true","kat.node":"n2","name":"other"}},"time":1795403235}

{"status":"died","id":"a","Type":"container","Action":"died","Actor":{"ID":"a","Attributes":{"containerExitCode":"3","kat.managed":"true","kat.node":"n1","name":"web-1"}},"time":1795403236}
`})
	out := make(chan Event, 10)
	err := f.pm.Events(context.Background(), map[string]string{LabelNode: "n1"}, out)
	// The fake ends its stream, which a real podman never does.
	if err == nil || !strings.Contains(err.Error(), "podman's event stream ended unexpectedly") {
		t.Fatalf("end of stream: %v", err)
	}
	q := f.last(t, http.MethodGet, "/events").Query
	if q.Get("stream") != "true" || q.Get("filters") != `{"label":["kat.managed=true","kat.node=n1"],"type":["container"]}` {
		t.Fatalf("query %v", q)
	}
	close(out)
	var got []Event
	for ev := range out {
		got = append(got, ev)
	}
	labels := map[string]string{LabelManaged: "true", LabelNode: "n1"}
	want := []Event{
		{ID: "a", Name: "web-1", Image: "i", Action: ActionStart, Labels: labels, Time: time.Unix(0, 1795403235324157790).UTC()},
		{ID: "a", Name: "web-1", Action: ActionDied, Labels: labels, ExitCode: 3, Time: time.Unix(1795403236, 0).UTC()},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %+v\nwant %+v", got, want)
	}

	f.route(t, fakeRoute{Method: http.MethodGet, Path: "/events", Status: 200, Body: "not json\n"})
	err = f.pm.Events(context.Background(), nil, make(chan Event, 1))
	if err == nil || !strings.Contains(err.Error(), `parse podman event "not json"`) {
		t.Fatalf("garbage event: %v", err)
	}
}

// TestAutoUserNSCreatesRunOneAtATime checks that no two creates with
// --userns auto run at once (podman 4.3.1 can deadlock then), whether they
// come from one driver or from two (as from two processes, each with its
// service): the fake fails when it finds another create running.
func TestAutoUserNSCreatesRunOneAtATime(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	f.route(t, fakeRoute{Method: http.MethodPost, Path: "/containers/create", Status: 201, Body: `{"Id":"0123abcd"}`, Exclusive: true})
	other := NewPodman(f.pm.Config()) // another driver: its own queue and service, the same lock file
	t.Cleanup(func() { must(t, other.Close()) })
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
	f.route(t, fakeRoute{Method: http.MethodPost, Path: "/containers/create", Status: 201, Body: `{"Id":"0123abcd"}`})
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

// TestCancelAsksPodmanToStop: an ended context sends a podman command
// (here the host check's podman info) SIGTERM (it cleans up what it
// started) before WaitDelay's kill.
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
	go func() { errc <- f.pm.CheckHost(ctx) }()
	polltest.Until(t, 10*time.Second, "podman starts", func() bool {
		_, err := os.Stat(filepath.Join(f.dir, "started"))
		return err == nil
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled check: %v, want context.Canceled", err)
	}
	if b, err := os.ReadFile(filepath.Join(f.dir, "signal")); err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Fatalf("podman got no SIGTERM (%q, %v): it was killed", b, err)
	}
}

// TestServiceStartsAgainAfterItDied: a call that finds the service gone
// (killed, or exited idle) starts it again and goes through.
func TestServiceStartsAgainAfterItDied(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	f.route(t, fakeRoute{Method: http.MethodGet, Path: "/containers/c1/exists", Status: http.StatusNoContent})
	ctx := context.Background()
	if ok, err := f.pm.containerExists(ctx, "c1"); err != nil || !ok {
		t.Fatalf("first call: %v, %v", ok, err)
	}
	f.pm.svc.mu.Lock()
	first := f.pm.svc.proc
	f.pm.svc.mu.Unlock()
	must(t, first.cmd.Process.Kill())
	<-first.done
	if ok, err := f.pm.containerExists(ctx, "c1"); err != nil || !ok {
		t.Fatalf("call after the service died: %v, %v", ok, err)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "service-args"))
	must(t, err)
	if n := strings.Count(string(b), "system\nservice\n"); n != 2 {
		t.Fatalf("the service was started %d times, want 2", n)
	}
}

// TestServiceThatCannotStart: a service that exits at start fails the call
// with ErrServiceUnavailable and podman's own words; the next call tries
// again.
func TestServiceThatCannotStart(t *testing.T) {
	f := newFakePodman(t, PodmanConfig{})
	must(t, os.WriteFile(f.pm.cfg.Binary, []byte("#!/bin/sh\necho 'Error: unrecognized command `podman system service`' >&2\nexit 125\n"), 0o755))
	_, err := f.pm.InspectContainer(context.Background(), "c1")
	if !errors.Is(err, ErrServiceUnavailable) || !strings.Contains(err.Error(), "unrecognized command") {
		t.Fatalf("got %v, want ErrServiceUnavailable with podman's message", err)
	}
	must(t, f.pm.Close())
	if _, err := f.pm.InspectContainer(context.Background(), "c1"); !errors.Is(err, ErrServiceUnavailable) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("call after Close: %v", err)
	}
}

// TestRegistryAuthHeader: the credentials of a podman auth file reach the
// service as podman's remote client sends them.
func TestRegistryAuthHeader(t *testing.T) {
	file := filepath.Join(t.TempDir(), "auth.json")
	must(t, os.WriteFile(file, []byte(`{"auths":{"reg.example:5000":{"auth":"`+base64.StdEncoding.EncodeToString([]byte("kat:pa:ss"))+`"}}}`), 0o600))
	h, err := registryAuthHeader(file)
	must(t, err)
	raw, err := base64.URLEncoding.DecodeString(h.Get("X-Registry-Auth"))
	if err != nil || string(raw) != `{"reg.example:5000":{"username":"kat","password":"pa:ss"}}` {
		t.Fatalf("header %q (%s), %v", h.Get("X-Registry-Auth"), raw, err)
	}
	if user, pass, ok := RegistryCredentials(file, "reg.example:5000"); !ok || user != "kat" || pass != "pa:ss" {
		t.Fatalf("credentials %q %q %v", user, pass, ok)
	}
	if h, err := registryAuthHeader(""); h != nil || err != nil {
		t.Fatalf("no auth file: %v, %v", h, err)
	}
	if _, err := registryAuthHeader(filepath.Join(t.TempDir(), "absent.json")); err == nil {
		t.Fatal("a missing auth file is no error")
	}
}
