package kat

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kat.dws.rip/kat/internal/testenv"
)

// TestCheckCommitsScript: scripts/check-commits.sh, which task check runs,
// refuses a commit subject longer than 72 characters (counted in
// characters) after its base, accepts shorter ones, and passes, saying
// so, in a clone that does not hold the base, as a shallow clone does not.
func TestCheckCommitsScript(t *testing.T) {
	for _, prog := range []string{"git", "bash"} {
		if _, err := exec.LookPath(prog); err != nil {
			testenv.SkipOrFail(t, "%s is not installed: %v", prog, err)
		}
	}
	script, err := os.ReadFile(filepath.Join("scripts", "check-commits.sh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts", "check-commits.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(subject string) string {
		t.Helper()
		git("commit", "-q", "--allow-empty", "-m", subject, "-m", "The body says why.")
		return git("rev-parse", "HEAD")
	}
	check := func(base string) (string, error) {
		t.Helper()
		cmd := exec.Command("bash", filepath.Join("scripts", "check-commits.sh"), base)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	git("init", "-q", "-b", "main")
	commit("a subject from before the rule, which may run on for as long as it likes, as they used to")
	base := commit("base: the first commit of the rule")
	commit("gitsync: this subject has exactly seventy-two characters, as is allowed.") // 72
	commit("README: ümlauts and em dashes — count as one character each, not bytes!.") // 72, 75 bytes

	if out, err := check(base); err != nil {
		t.Fatalf("subjects of at most 72 characters: %v\n%s", err, out)
	}
	long := commit("webhook: a subject that runs on past the seventy-two characters the rule allows!!") // 81
	out, err := check(base)
	if err == nil || !strings.Contains(out, long[:12]) || !strings.Contains(out, "81 characters") {
		t.Fatalf("a subject of 81 characters: %v, want a failure naming commit %s and its length\n%s", err, long[:12], out)
	}
	if out, err := check("0123456789abcdef0123456789abcdef01234567"); err != nil || !strings.Contains(out, "not checked") {
		t.Fatalf("a base this clone does not hold: %v, want a pass that says nothing was checked\n%s", err, out)
	}
}
