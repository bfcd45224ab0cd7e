package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	katruntime "kat.dws.rip/kat/runtime"
)

var binaries Binaries

func TestMain(m *testing.M) {
	var remove func()
	var err error
	if binaries, remove, err = BuildTemp(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	remove()
	os.Exit(code)
}

func sharedBinaries(testing.TB) Binaries { return binaries }

// StartTestCluster builds the binaries (once per test binary run, via
// sharedBinaries) and starts a cluster in t.TempDir(), stopping it at the end.
func StartTestCluster(t testing.TB) *Cluster {
	t.Helper()
	return startClusterFrom(t, filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
}

// startClusterFrom is StartTestCluster with the cluster.kat at path; setup
// funcs change the cluster before it starts.
func startClusterFrom(t testing.TB, path string, setup ...func(*Cluster)) *Cluster {
	t.Helper()
	bin := sharedBinaries(t)
	c, err := NewCluster(bin, t.TempDir(), path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(c)
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

// containerPorts is where tests pick the ports their workloads publish:
// apart from the kernel's ephemeral ports (which the API servers and Git
// servers of tests get) and from the agents' own host-port range, so that a
// published port, which captures every local connection to it, never
// captures another test's server.
var containerPorts = katruntime.PortRange{First: 20000, Last: 29999}

// containerPort returns a port of containerPorts free on the host now, for a
// workload to publish.
func containerPort(t testing.TB) int {
	t.Helper()
	p := containerPorts.Pick(nil)
	if p == 0 {
		t.Fatalf("no free port in %s", containerPorts)
	}
	return p
}
