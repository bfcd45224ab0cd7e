package runtime

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeHost makes a directory of executables named names, and a fake podman
// whose `info` prints the given backend and OCI runtime path.
func fakeHost(t *testing.T, backend, ociPath string, names ...string) (podman, bin string) {
	t.Helper()
	bin = t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(bin, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	podman = filepath.Join(bin, "podman")
	script := "#!/bin/sh\nprintf '" + backend + "\\trunc\\t" + ociPath + "\\n'\n"
	if err := os.WriteFile(podman, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return podman, bin
}

// TestCheckHostNamesWhatIsMissing: each program Podman's network backend
// runs that is missing is named, with what needs it and the package that
// installs it; a complete host passes.
func TestCheckHostNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		backend string
		oci     string
		have    []string
		want    []string // "" for no error
	}{
		{name: "netavark without iptables", backend: "netavark", oci: "/usr/bin/runc",
			want: []string{"iptables is not in PATH", "netavark needs it", "apt-get install iptables"}},
		{name: "netavark with iptables", backend: "netavark", oci: "/usr/bin/runc", have: []string{"iptables"}},
		{name: "cni without plugins or iptables", backend: "cni", oci: "/usr/bin/runc",
			want: []string{"iptables is not in PATH", "apt-get install iptables"}},
		{name: "no OCI runtime", backend: "netavark", have: []string{"iptables"},
			want: []string{"runc (podman's OCI runtime) is not installed", "apt-get install runc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			podman, bin := fakeHost(t, tc.backend, tc.oci, tc.have...)
			err := NewPodman(PodmanConfig{Binary: podman}).checkHost(context.Background(), bin)
			if len(tc.want) == 0 {
				// netavark itself lives in podman's helper dirs: present
				// on this machine only when installed, so accept its
				// absence alone.
				if err != nil && !onlyMissing(err, "netavark is not in") {
					t.Fatalf("checkHost: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrHostPrerequisite) {
				t.Fatalf("checkHost = %v, want ErrHostPrerequisite", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if err := NewPodman(PodmanConfig{Binary: "no-such-podman"}).checkHost(context.Background(), t.TempDir()); !errors.Is(err, ErrHostPrerequisite) ||
		!strings.Contains(err.Error(), "apt-get install podman") {
		t.Errorf("missing podman: %v", err)
	}
}

// onlyMissing reports whether err's message names only one missing program.
func onlyMissing(err error, what string) bool {
	return strings.Contains(err.Error(), what) && strings.Count(err.Error(), " is not ") == 1
}

// TestHostPrerequisiteHint: podman's bare "netavark: No such file or
// directory" becomes an error that matches ErrHostPrerequisite; other
// errors are left alone.
func TestHostPrerequisiteHint(t *testing.T) {
	t.Parallel()
	podman, _ := fakeHost(t, "netavark", "/usr/bin/runc")
	p := NewPodman(PodmanConfig{Binary: podman})
	if err := p.hostPrerequisiteHint("Error: netavark: No such file or directory (os error 2)"); !errors.Is(err, ErrHostPrerequisite) {
		t.Errorf("netavark's error: %v, want ErrHostPrerequisite", err)
	}
	if err := p.hostPrerequisiteHint("Error: no such container x"); err != nil {
		t.Errorf("an unrelated error got a hint: %v", err)
	}
	ce := &CommandError{Args: []string{"run"}, Stderr: "Error: netavark: No such file or directory (os error 2)",
		Err: p.hostPrerequisiteHint("Error: netavark: No such file or directory (os error 2)")}
	if !strings.Contains(ce.Error(), "netavark: No such file") || !strings.Contains(ce.Error(), "install") {
		t.Errorf("CommandError %q keeps podman's words and adds the fix", ce)
	}
}

// TestCheckHostOnThisMachine runs the check against the real Podman: with
// the installed prerequisites it passes; with a PATH that lacks /usr/sbin
// (where iptables lives) it names iptables, and so does a real container
// start under that PATH.
func TestCheckHostOnThisMachine(t *testing.T) {
	p, label := podmanForTest(t)
	ctx := testCtx(t)
	if err := p.CheckHost(ctx); err != nil {
		skipOrFail(t, "this machine lacks a podman prerequisite (run scripts/install-prereqs.sh): %v", err)
	}
	ipt, err := exec.LookPath("iptables")
	if err != nil || !strings.HasPrefix(ipt, "/usr/sbin/") {
		t.Skipf("iptables is at %q, not only in /usr/sbin: cannot hide it with PATH", ipt)
	}
	err = p.checkHost(ctx, "/usr/bin:/bin")
	if !errors.Is(err, ErrHostPrerequisite) || !strings.Contains(err.Error(), "iptables is not in PATH (/usr/bin:/bin)") {
		t.Fatalf("check with PATH=/usr/bin:/bin: %v, want iptables named", err)
	}
	// A real container with a published port under that PATH.
	cmd := exec.CommandContext(ctx, "podman", append(p.GlobalArgs(), "run", "--rm", "--label", testLabel+"="+label,
		"-p", "127.0.0.1::8080", baseImage, "true")...)
	cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin")
	out, runErr := cmd.CombinedOutput()
	if runErr == nil {
		t.Skipf("podman ran without iptables in PATH here (backend %s): nothing to classify", out)
	}
	hint := p.hostPrerequisiteHint(string(out))
	if !errors.Is(hint, ErrHostPrerequisite) {
		t.Fatalf("podman's failure %q was not recognised as a missing prerequisite", out)
	}
}
