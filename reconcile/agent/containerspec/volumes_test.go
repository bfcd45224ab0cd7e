package containerspec

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPrepareVolumes(t *testing.T) {
	type kind int
	const (
		absent kind = iota
		dir
		file
		socket
	)
	make := func(t *testing.T, p string, k kind) {
		t.Helper()
		switch k {
		case dir:
			must(t, os.MkdirAll(p, 0o755))
		case file:
			must(t, os.WriteFile(p, []byte("x"), 0o644))
		case socket:
			l, err := net.Listen("unix", p)
			must(t, err)
			t.Cleanup(func() { l.Close() })
		}
	}
	for _, tc := range []struct {
		name    string
		ensure  string
		have    kind
		wantErr string // "" for success
		after   kind   // what the path is afterwards, on success
	}{
		{"DirectoryOrCreate creates", EnsureDirectoryOrCreate, absent, "", dir},
		{"DirectoryOrCreate keeps a directory", EnsureDirectoryOrCreate, dir, "", dir},
		{"DirectoryOrCreate refuses a file", EnsureDirectoryOrCreate, file, "exists but is not a directory", file},
		{"Directory accepts a directory", EnsureDirectory, dir, "", dir},
		{"Directory refuses absence", EnsureDirectory, absent, "ensureType Directory: does not exist", absent},
		{"Directory refuses a file", EnsureDirectory, file, "exists but is not a directory", file},
		{"FileOrCreate creates", EnsureFileOrCreate, absent, "", file},
		{"FileOrCreate keeps a file", EnsureFileOrCreate, file, "", file},
		{"FileOrCreate refuses a directory", EnsureFileOrCreate, dir, "exists but is not a regular file", dir},
		{"File accepts a file", EnsureFile, file, "", file},
		{"File refuses absence", EnsureFile, absent, "ensureType File: does not exist", absent},
		{"File refuses a directory", EnsureFile, dir, "exists but is not a regular file", dir},
		{"Socket accepts a socket", EnsureSocket, socket, "", socket},
		{"Socket refuses a file", EnsureSocket, file, "exists but is not a unix socket", file},
		{"Socket refuses absence", EnsureSocket, absent, "ensureType Socket: does not exist", absent},
		{"no ensureType checks nothing", EnsureNone, absent, "", absent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "a", "v")
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			make(t, p, tc.have)
			err := PrepareVolumes([]VolumePath{{Name: "vol", Path: p, Ensure: tc.ensure}})
			if tc.wantErr != "" {
				if !errors.Is(err, ErrVolumeNotReady) || !strings.Contains(err.Error(), tc.wantErr) ||
					!strings.Contains(err.Error(), `volume "vol" at `+p) {
					t.Fatalf("got %v, want ErrVolumeNotReady naming the volume, its path and %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := kindOf(p); got != map[kind]string{absent: "absent", dir: "dir", file: "file", socket: "socket"}[tc.after] {
				t.Fatalf("afterwards the path is %s", got)
			}
		})
	}
}

func TestPrepareVolumesSubPaths(t *testing.T) {
	base := t.TempDir()
	vol := filepath.Join(base, "ns", "wl", "data")
	vols := []VolumePath{{Name: "data", Path: vol, Ensure: EnsureDirectoryOrCreate, ClusterStorage: true, SubPaths: []string{"logs/web", "one"}}}
	must(t, PrepareVolumes(vols))
	must(t, PrepareVolumes(vols)) // idempotent
	for _, p := range []string{vol, filepath.Join(vol, "logs", "web"), filepath.Join(vol, "one")} {
		if kindOf(p) != "dir" {
			t.Fatalf("%s is %s, want a directory", p, kindOf(p))
		}
	}
	// A symbolic link planted inside the volume must not lead a sub-path
	// mount outside it.
	must(t, os.Symlink("/etc", filepath.Join(vol, "evil")))
	err := PrepareVolumes([]VolumePath{{Name: "data", Path: vol, Ensure: EnsureDirectoryOrCreate, SubPaths: []string{"evil/ssl"}}})
	if !errors.Is(err, ErrVolumeNotReady) || !strings.Contains(err.Error(), "is a symbolic link, refused") {
		t.Fatalf("sub-path through a symlink: got %v", err)
	}
	must(t, os.WriteFile(filepath.Join(vol, "afile"), nil, 0o644))
	err = PrepareVolumes([]VolumePath{{Name: "data", Path: vol, Ensure: EnsureDirectoryOrCreate, SubPaths: []string{"afile/x"}}})
	if !errors.Is(err, ErrVolumeNotReady) || !strings.Contains(err.Error(), "is not a directory") {
		t.Fatalf("sub-path below a file: got %v", err)
	}
}

func kindOf(p string) string {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return "absent"
	case fi.IsDir():
		return "dir"
	case fi.Mode().IsRegular():
		return "file"
	case fi.Mode().Type() == os.ModeSocket:
		return "socket"
	}
	return fi.Mode().String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
