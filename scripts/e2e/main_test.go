package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var binaries Binaries

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kat-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binaries, err = Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func sharedBinaries(testing.TB) Binaries { return binaries }

// StartTestCluster builds the binaries (once per test binary run, via
// sharedBinaries) and starts a cluster in t.TempDir(), stopping it at the end.
func StartTestCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := sharedBinaries(t)
	c, err := NewCluster(bin, t.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.Running() {
			if err := c.Stop(30 * time.Second); err != nil {
				t.Errorf("stop kat-agent: %v\n%s", err, c.Tail(20))
			}
		}
		if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("remove the test's containers: %v", err)
		}
	})
	return c
}
