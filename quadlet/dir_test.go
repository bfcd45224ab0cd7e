//go:build linux

package quadlet

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// writeDir creates files (name -> content) in a new temporary directory.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadDirAccepts(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{
		"workload.kat":  minimalWorkload,
		"job.kat":       "x",
		".gitkeep":      "",
		".workload.kat": "hidden",
		"workload.kat~": "backup",
	})
	for _, sub := range []string{".git", ".cache"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, ".hidden-link")); err != nil {
		t.Fatal(err)
	}
	files, err := ReadDir(dir, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || string(files["workload.kat"]) != minimalWorkload || string(files["job.kat"]) != "x" {
		t.Errorf("files = %q, want workload.kat and job.kat only", files)
	}
}

func TestReadDirRefuses(t *testing.T) {
	t.Parallel()
	kib := strings.Repeat("x", 1<<10)
	small := Limits{MaxFiles: 2, MaxFileBytes: 1 << 10, MaxTotalBytes: 3 << 9}
	tests := []struct {
		name     string
		setup    func(t *testing.T, dir string)
		lim      Limits
		tooLarge bool
		want     string
	}{
		{
			name: "symlink",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				must(t, os.Symlink("workload.kat", filepath.Join(dir, "job.kat")))
			},
			want: "job.kat: is a symbolic link",
		},
		{
			name:  "sub-directory",
			setup: func(t *testing.T, dir string) { t.Helper(); must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755)) },
			want:  "sub: is a directory",
		},
		{
			name: "non-kat file",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				must(t, os.WriteFile(filepath.Join(dir, "README.md"), nil, 0o644))
			},
			want: "README.md: is not a .kat file",
		},
		{
			name: "fifo",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				must(t, syscall.Mkfifo(filepath.Join(dir, "pipe.kat"), 0o644))
			},
			want: "pipe.kat: is not a regular file",
		},
		{
			name: "socket",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				l, err := net.Listen("unix", filepath.Join(dir, "s.kat"))
				if err != nil {
					t.Skipf("cannot create a unix socket here: %v", err)
				}
				t.Cleanup(func() { l.Close() })
			},
			want: "s.kat: is not a regular file",
		},
		{
			name: "device",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				if err := syscall.Mknod(filepath.Join(dir, "null.kat"), syscall.S_IFCHR|0o644, 0x103); err != nil {
					t.Skipf("cannot create a device file (needs root): %v", err)
				}
			},
			want: "null.kat: is not a regular file",
		},
		{
			name: "oversized file",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				must(t, os.WriteFile(filepath.Join(dir, "big.kat"), []byte(kib+"x"), 0o644))
			},
			lim:      small,
			tooLarge: true,
			want:     "big.kat: 1025 bytes, more than the limit of 1024",
		},
		{
			name: "too many files",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				must(t, os.WriteFile(filepath.Join(dir, "a.kat"), nil, 0o644))
				must(t, os.WriteFile(filepath.Join(dir, "b.kat"), nil, 0o644))
			},
			lim:      small,
			tooLarge: true,
			want:     "more than 2 .kat files",
		},
		{
			name: "total too large",
			setup: func(t *testing.T, dir string) {
				t.Helper()
				must(t, os.WriteFile(filepath.Join(dir, "a.kat"), []byte(kib), 0o644))
			},
			lim:      small,
			tooLarge: true,
			want:     "files hold more than 1536 bytes",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeDir(t, map[string]string{"workload.kat": strings.Repeat("#", 600)})
			tc.setup(t, dir)
			_, err := ReadDir(dir, tc.lim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %q", err, tc.want)
			}
			if errors.Is(err, ErrTooLarge) != tc.tooLarge {
				t.Errorf("errors.Is(err, ErrTooLarge) = %v, want %v", !tc.tooLarge, tc.tooLarge)
			}
		})
	}
}

func TestReadDirEmpty(t *testing.T) {
	t.Parallel()
	dir := writeDir(t, map[string]string{".gitkeep": ""})
	if _, err := ReadDir(dir, DefaultLimits); err == nil || !strings.Contains(err.Error(), "no .kat files") {
		t.Errorf("error = %v, want no .kat files", err)
	}
	if _, err := ReadDir(filepath.Join(dir, "missing"), DefaultLimits); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v, want ErrNotExist", err)
	}
}

func TestLimitsCheck(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxFiles: 2, MaxFileBytes: 4, MaxTotalBytes: 6}
	tests := []struct {
		name  string
		files map[string][]byte
		ok    bool
	}{
		{"within", map[string][]byte{"a.kat": []byte("1234"), "b.kat": []byte("12")}, true},
		{"too many", map[string][]byte{"a.kat": nil, "b.kat": nil, "c.kat": nil}, false},
		{"file too big", map[string][]byte{"a.kat": []byte("12345")}, false},
		{"total too big", map[string][]byte{"a.kat": []byte("1234"), "b.kat": []byte("123")}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := lim.Check(tc.files)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrTooLarge)) {
				t.Errorf("Check = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	if (Limits{}).withDefaults() != DefaultLimits {
		t.Errorf("zero Limits do not mean DefaultLimits")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
