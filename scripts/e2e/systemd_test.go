package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnits: the unit files in scripts/systemd pass systemd-analyze
// verify without a warning, and their ExecStart, with the variables of
// kat-agent.env filled in, is a command line kat-agent accepts.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	units, err := filepath.Glob(filepath.Join(RepoRoot(), "scripts", "systemd", "*.service"))
	if err != nil || len(units) < 2 {
		t.Fatalf("unit files: %v (%v)", units, err)
	}
	bin := sharedBinaries(t)
	vars := strings.NewReplacer("${KAT_LEADER_API}", "192.0.2.10:9115", "$KAT_AGENT_ARGS", "--advertise-address 192.0.2.11")
	dir := t.TempDir()
	for _, unit := range units {
		b, err := os.ReadFile(unit)
		if err != nil {
			t.Fatal(err)
		}
		var exec0 string
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
				exec0 = v
			}
		}
		args := strings.Fields(vars.Replace(exec0))
		if len(args) < 3 || args[0] != "/usr/local/bin/kat-agent" {
			t.Fatalf("%s: ExecStart %q, want /usr/local/bin/kat-agent and its arguments", unit, exec0)
		}
		// --help after the arguments: kat-agent parses them all and
		// refuses an unknown flag, then prints its help instead of running.
		if out, err := exec.Command(bin.Agent, append(args[1:], "--help")...).CombinedOutput(); err != nil {
			t.Errorf("%s: kat-agent refuses ExecStart's arguments %q: %v\n%s", unit, args[1:], err, out)
		}
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			continue // verified where systemd is installed
		}
		// verify checks that ExecStart's binary exists: the copy runs
		// the built one.
		local := filepath.Join(dir, filepath.Base(unit))
		if err := os.WriteFile(local, bytes.ReplaceAll(b, []byte("/usr/local/bin/kat-agent"), []byte(bin.Agent)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("systemd-analyze", "verify", local).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(unit), err, out)
		}
	}
}
