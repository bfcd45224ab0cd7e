package runtime

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPodmanRemovesAStopCutShort: a podman rm killed while it waits for the
// container to stop leaves the container "stopping" for good, and Podman
// 4.3's rm --force then removes it without stopping it: its processes (its
// init, its conmon, which holds its published port) run on, unseen. That is
// how a kat-agent stopped in the middle of a removal lost containers.
// StopContainer stops such a container, after which its removal leaves
// nothing; StopAndRemoveContainer without it leaves no process either: it
// kills what Podman left and says so.
func TestPodmanRemovesAStopCutShort(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	// cutShort runs a container that ignores SIGTERM and kills the podman
	// rm that stops it while it waits out the grace period. It returns the
	// container's ID and its processes, conmon included.
	cutShort := func(name string) (string, []int) {
		t.Helper()
		spec := testSpec(mark, name, "100000")
		spec.Command = []string{"/bin/sleep"} // PID 1 without a handler: SIGTERM is ignored
		spec.Ports = []PortMapping{{HostIP: "127.0.0.1", HostPort: testContainerPorts.Pick(nil), ContainerPort: 8080}}
		id, err := pm.RunContainer(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		st, err := pm.InspectContainer(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		procs, conmons, err := containerProcs(procRoot, id)
		if err != nil || !slices.Contains(procs, st.Pid) || len(conmons) != 1 {
			t.Fatalf("processes of the running container %s: %v and conmons %v (%v); want its init %d and one conmon", name, procs, conmons, err, st.Pid)
		}
		rm := pm.command(ctx, "rm", "--force", "--time", "60", "--", id)
		if err := rm.Start(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, name+" stopping", func() (bool, error) {
			st, err := pm.InspectContainer(ctx, id)
			return err == nil && st.Stopping(), err
		})
		_ = rm.Process.Kill()
		_ = rm.Wait()
		if st, err := pm.InspectContainer(ctx, id); err != nil || !st.Stopping() {
			t.Fatalf("%s after its podman rm was killed: %+v, %v; want it stopping", name, st, err)
		}
		return id, slices.Concat(procs, conmons)
	}

	id, pids := cutShort("stopped-first")
	if err := pm.StopContainer(ctx, id, time.Second); err != nil {
		t.Fatalf("stop of a container whose stop was cut short: %v", err)
	}
	if st, err := pm.InspectContainer(ctx, id); err != nil || st.State != StateExited || st.Stopping() {
		t.Fatalf("after the stop: %+v, %v; want it exited", st, err)
	}
	if err := pm.StopAndRemoveContainer(ctx, id, time.Second); err != nil {
		t.Fatalf("removal after the stop: %v", err)
	}
	eventually(t, 30*time.Second, "the stopped container's processes gone", func() (bool, error) {
		left := running(pids)
		return len(left) == 0, errors.New("still running: " + strings.Join(left, " "))
	})

	id, pids = cutShort("removed")
	t.Cleanup(func() {
		// Podman forgot it without deleting it from runc: runc keeps
		// its state (without processes).
		_ = exec.Command("runc", "delete", "--force", id).Run()
	})
	err := pm.StopAndRemoveContainer(ctx, id, time.Second)
	if left := running(pids); len(left) > 0 {
		t.Fatalf("after StopAndRemoveContainer (%v), processes of the container still run: %s", err, strings.Join(left, " "))
	}
	if err != nil && !errors.Is(err, ErrKilledLeftovers) {
		t.Fatal(err) // nil: a podman that stops a stopping container before removing it (4.4 and later)
	}
	t.Logf("podman %s: %v", podmanVersion(t, pm), err)
	if exists, err := pm.containerExists(ctx, id); err != nil || exists {
		t.Fatalf("after StopAndRemoveContainer: exists %v, %v", exists, err)
	}
}

// running returns those of pids that run (not zombies), with their
// command names.
func running(pids []int) []string {
	var left []string
	for _, pid := range pids {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err == nil && !zombie(stat) {
			left = append(left, strconv.Itoa(pid)+":"+strings.Fields(string(stat))[1])
		}
	}
	return left
}

func podmanVersion(t *testing.T, pm *Podman) string {
	t.Helper()
	out, err := pm.run(testCtx(t), "version", "--format", "{{.Client.Version}}")
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(out))
}

// TestPodmanRemovesInEveryState: StopAndRemoveContainer leaves no process
// of a container, and needs no kill of leftovers, in every other state the
// agent may find one in: created, initialized (podman init: conmon and
// runc's init run), running, paused and exited.
func TestPodmanRemovesInEveryState(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name, state string
		then        []string // podman commands that take a started container there
		start       bool
	}{
		{name: "created", state: "created"},
		{name: "initialized", state: "initialized", then: []string{"init"}},
		{name: "running", state: "running", start: true},
		{name: "paused", state: "paused", start: true, then: []string{"pause"}},
		{name: "exited", state: "exited", start: true, then: []string{"stop", "--time", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(mark, "state-"+tc.name, "100000")
			spec.Command = []string{"/bin/sleep"}
			id, err := pm.CreateContainer(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			if tc.start {
				if err := pm.StartContainer(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if tc.then != nil {
				if _, err := pm.run(ctx, append(tc.then, "--", id)...); err != nil {
					t.Fatal(err)
				}
			}
			st, err := pm.InspectContainer(ctx, id)
			if err != nil || st.RawState != tc.state {
				t.Fatalf("container in state %+v (%v), want %s", st, err, tc.state)
			}
			procs, conmons, _ := containerProcs(procRoot, id)
			pids := slices.Concat(procs, conmons)
			if err := pm.StopAndRemoveContainer(ctx, id, time.Second); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "its processes "+fmt.Sprint(pids)+" gone", func() (bool, error) {
				procs, conmons, err := containerProcs(procRoot, id)
				return err == nil && len(procs) == 0 && len(conmons) == 0 && len(running(pids)) == 0, err
			})
		})
	}
}
