package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestIsStatic tells a static program (built CGO_ENABLED=0) from one that
// needs the dynamic loader (this test binary, built with cgo when the race
// detector is on; else a system program).
func TestIsStatic(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\nfunc main() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	static := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-o", static, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if ok, err := isStatic(static); err != nil || !ok {
		t.Errorf("a CGO_ENABLED=0 program: static %v, %v", ok, err)
	}
	if ok, err := isStatic("/bin/sh"); err != nil || ok {
		t.Errorf("/bin/sh: static %v, %v; want dynamic", ok, err)
	}
	if _, err := isStatic(src); err == nil {
		t.Error("a Go source file read as ELF")
	}
}
