package usernsrun

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"kat.dws.rip/kat/internal/testenv"
)

func TestRuntimeCommand(t *testing.T) {
	for _, tc := range []struct {
		name            string
		args            []string
		command, bundle string
	}{
		{"create", []string{"create", "--bundle", "/b", "--pid-file", "/b/pid", "ctr"}, "create", "/b"},
		{"create with globals", []string{"--root", "/r", "--log", "create", "--systemd-cgroup", "create", "-b", "/x", "ctr"}, "create", "/x"},
		{"create bundle=", []string{"create", "--bundle=/y", "ctr"}, "create", "/y"},
		{"create in cwd", []string{"create", "ctr"}, "create", "."},
		{"delete", []string{"delete", "ctr"}, "delete", "."},
		{"state", []string{"--debug", "state", "ctr"}, "state", "."},
		{"nothing", []string{"--version"}, "", "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			command, bundle := runtimeCommand(tc.args)
			if command != tc.command || bundle != tc.bundle {
				t.Errorf("runtimeCommand(%q) = %q, %q; want %q, %q", tc.args, command, bundle, tc.command, tc.bundle)
			}
		})
	}
}

// TestWrapperScript runs the wrapper script with a stand-in helper and
// runtime: create and delete go to the helper, the rest to the runtime, as
// runtimeCommand reads the arguments too.
func TestWrapperScript(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "it's here")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	helper, rt, script := filepath.Join(dir, "helper"), filepath.Join(dir, "runc"), filepath.Join(dir, wrapperName)
	for p, content := range map[string]string{
		helper: "#!/bin/sh\necho helper \"$@\"\n",
		rt:     "#!/bin/sh\necho runtime \"$@\"\n",
		script: wrapperScript(helper),
	} {
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"create", "--bundle", "/b", "ctr"},
		{"--root", "/r", "--log", "create", "delete", "ctr"},
		{"--debug", "delete", "ctr"},
		{"state", "ctr"},
		{"start", "create"},
		{"--root", "create", "kill", "ctr", "KILL"},
		{"--version"},
	} {
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), envRuntime+"="+rt)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", args, err, out)
		}
		want := "runtime"
		if c, _ := runtimeCommand(args); c == "create" || c == "delete" {
			want = "helper"
		}
		if got := string(out); got != want+" "+strings.Join(args, " ")+"\n" {
			t.Errorf("%q went to %q, want the %s", args, got, want)
		}
	}
	out, err := exec.Command(script, "state", "x").CombinedOutput()
	if err == nil || !strings.Contains(string(out), envRuntime) {
		t.Errorf("without %s: %v, %s; want a failure naming it", envRuntime, err, out)
	}
}

func TestParseIDMapEnv(t *testing.T) {
	if m, err := parseIDMapEnv("0:2147483647:65536"); err != nil || m != (idMap{HostBase: 2147483647, Size: 65536}) {
		t.Errorf("parse: %+v, %v", m, err)
	}
	for _, bad := range []string{"", "0:0:65536", "1:100000:65536", "0:100000", "0:100000:0", "0:-5:10", "0:x:10", "0:4294967290:65536"} {
		if _, err := parseIDMapEnv(bad); err == nil || !strings.Contains(err.Error(), envIDMap) {
			t.Errorf("parseIDMapEnv(%q): err %v, want one naming %s", bad, err, envIDMap)
		}
	}
}

func TestFindOverlay(t *testing.T) {
	const root = "/var/tmp/buildah123/mnt/rootfs"
	line := func(mountPoint, fstype, opts string) string {
		return "1020 1010 0:55 / " + mountPoint + " rw,relatime - " + fstype + " overlay " + opts + "\n"
	}
	absolute := "rw,lowerdir=/s/overlay/l/AAA:/s/overlay/l/BBB,upperdir=/s/overlay/abc/diff,workdir=/s/overlay/abc/work,uuid=on,fsync=volatile"
	for _, tc := range []struct {
		name      string
		mountinfo string
		want      overlayMount
		err       string
	}{
		{
			name:      "absolute",
			mountinfo: line("/", "ext4", "rw") + line(root, "overlay", absolute),
			want: overlayMount{
				lowers: []string{"/s/overlay/l/AAA", "/s/overlay/l/BBB"}, upper: "/s/overlay/abc/diff", work: "/s/overlay/abc/work",
				options: []string{"uuid=on", "fsync=volatile"},
			},
		},
		{
			name:      "relative, from a long mount",
			mountinfo: line(root, "overlay", "rw,lowerdir=l/AAA:l/BBB,upperdir=abc/diff,workdir=abc/work,volatile"),
			want: overlayMount{
				lowers: []string{"/home/overlay/l/AAA", "/home/overlay/l/BBB"}, upper: "/home/overlay/abc/diff", work: "/home/overlay/abc/work",
				options: []string{"volatile"},
			},
		},
		{
			name:      "escaped space, the last mount wins",
			mountinfo: line(`/var/tmp/a\040b`, "tmpfs", "rw") + line(`/var/tmp/a\040b`, "overlay", `rw,lowerdir=/s\040t/l/A,upperdir=/s\040t/x/diff,workdir=/s\040t/x/work`),
			want:      overlayMount{lowers: []string{"/s t/l/A"}, upper: "/s t/x/diff", work: "/s t/x/work"},
		},
		{name: "not mounted", mountinfo: line("/other", "overlay", absolute), err: "nothing is mounted"},
		{name: "not overlay", mountinfo: line(root, "vfs", "rw"), err: "not overlay"},
		{name: "no upper", mountinfo: line(root, "overlay", "rw,lowerdir=/a:/b"), err: "lacks"},
		{name: "data-only layers", mountinfo: line(root, "overlay", "rw,lowerdir=/a::/b,upperdir=/x/diff,workdir=/x/work"), err: "data-only"},
		{name: "work elsewhere", mountinfo: line(root, "overlay", "rw,lowerdir=/a,upperdir=/x/diff,workdir=/y/work"), err: "not in one layer directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mp := root
			if strings.Contains(tc.name, "escaped") {
				mp = "/var/tmp/a b"
			}
			got, err := findOverlay(strings.NewReader(tc.mountinfo), mp, "/home/overlay")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, err := findOverlay(strings.NewReader(line(root, "overlay", "rw,lowerdir=l/A,upperdir=x/diff,workdir=x/work")), root, ""); err == nil || !strings.Contains(err.Error(), envOverlayHome) {
		t.Errorf("relative paths without the overlay home: err %v", err)
	}
}

func TestSpecRewrite(t *testing.T) {
	const config = `{"ociVersion":"1.0.2-dev","process":{"user":{"uid":0,"gid":0}},"root":{"path":"/b/mnt/rootfs"},` +
		`"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}],"seccomp":{"defaultErrnoRet":38}},"annotations":{"big":18446744073709551615}}`
	spec, root, err := decodeSpec([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	if root != "/b/mnt/rootfs" {
		t.Errorf("root %q", root)
	}
	out, err := encodeSpec(spec, "/b/kat/root", idMap{HostBase: 2147483647, Size: 65536})
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	wantJSON := `{"ociVersion":"1.0.2-dev","process":{"user":{"uid":0,"gid":0}},"root":{"path":"/b/kat/root"},` +
		`"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"},{"type":"user"}],"seccomp":{"defaultErrnoRet":38},` +
		`"uidMappings":[{"containerID":0,"hostID":2147483647,"size":65536}],"gidMappings":[{"containerID":0,"hostID":2147483647,"size":65536}]},` +
		`"annotations":{"big":18446744073709551615}}`
	if err := json.Unmarshal([]byte(wantJSON), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rewritten config\n got %s\nwant %s", out, wantJSON)
	}
	if !bytes.Contains(out, []byte("18446744073709551615")) {
		t.Errorf("a large number lost its digits: %s", out)
	}

	for name, bad := range map[string]string{
		"user namespace": `{"root":{"path":"/r"},"linux":{"namespaces":[{"type":"user"}]}}`,
		"uid mappings":   `{"root":{"path":"/r"},"linux":{"uidMappings":[{"containerID":0,"hostID":1,"size":1}]}}`,
		"no root":        `{"linux":{}}`,
		"no linux":       `{"root":{"path":"/r"}}`,
	} {
		if _, _, err := decodeSpec([]byte(bad)); err == nil {
			t.Errorf("%s: decoded, want an error", name)
		}
	}
}

// TestWhiteoutsGoToRoot: the whiteouts overlayfs made as the mounter (owned
// by the helper id) become root's; other files keep their owner.
func TestWhiteoutsGoToRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "making whiteouts (character devices 0/0) needs root")
	}
	upper := t.TempDir()
	wh := filepath.Join(upper, "dir", "gone")
	if err := os.MkdirAll(filepath.Dir(wh), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(wh, unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(upper, "dir", "file")
	if err := os.WriteFile(other, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{wh, other} {
		if err := os.Lchown(p, 65536, 65536); err != nil {
			t.Fatal(err)
		}
	}
	if err := giveWhiteoutsToRoot(upper, 65536); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{wh: 0, other: 65536} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != want || st.Gid != want {
			t.Errorf("%s owned by %d:%d, want %d", p, st.Uid, st.Gid, want)
		}
	}
}

func TestMain(m *testing.M) {
	// Check starts this test binary as the helper.
	Main()
	os.Exit(m.Run())
}

// TestInstallAndCheck installs the wrapper and the helper, a link to this
// test binary, which serves as the helper (TestMain calls Main); a link to
// another program does not.
func TestInstallAndCheck(t *testing.T) {
	dir := t.TempDir()
	wrapper, helper, err := Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	if wrapper != filepath.Join(dir, wrapperName) || helper != filepath.Join(dir, helperName) {
		t.Errorf("Install = %s, %s", wrapper, helper)
	}
	if b, err := os.ReadFile(wrapper); err != nil || string(b) != wrapperScript(helper) {
		t.Errorf("wrapper holds %q (%v), want the script", b, err)
	}
	if err := Check(t.Context(), helper); err != nil {
		t.Errorf("Check of this test binary: %v", err)
	}
	// Installing again replaces both.
	if _, _, err := Install(dir); err != nil {
		t.Fatalf("second Install: %v", err)
	}
	other := filepath.Join(t.TempDir(), helperName)
	if err := os.Symlink("/bin/true", other); err != nil {
		t.Fatal(err)
	}
	if err := Check(t.Context(), other); err == nil || !strings.Contains(err.Error(), "usernsrun.Main") {
		t.Errorf("Check of /bin/true: %v, want an error naming usernsrun.Main", err)
	}
}

func TestEnv(t *testing.T) {
	got := strings.Join(Env(2147614719, 65536, "/usr/bin/runc", "/s/overlay"), " ")
	want := "KAT_BUILD_IDMAP=0:2147614719:65536 KAT_BUILD_OCI_RUNTIME=/usr/bin/runc KAT_BUILD_OVERLAY_HOME=/s/overlay"
	if got != want {
		t.Errorf("Env = %s, want %s", got, want)
	}
	m, err := parseIDMapEnv(strings.TrimPrefix(Env(2147614719, 65536, "", "")[0], envIDMap+"="))
	if err != nil || m != (idMap{HostBase: 2147614719, Size: 65536}) {
		t.Errorf("the map Env passes parses as %+v, %v", m, err)
	}
}
