package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// BenchmarkStartContainers compares starting containers of the base image
// (a sleeping busybox) with `podman run -d` and with the driver's
// CreateContainer + StartContainer. Each iteration starts one container
// each way, interleaved so that other load on the machine hits both alike;
// it reports the mean of each (run-ms/op, driver-ms/op), their ratio and the
// slowest start of each (podman commands of other processes can stall one). Run
// it with -benchtime 50x for 50 sequential starts each way. The containers
// are removed at the end, outside the timed part. KAT_PODMAN_ARGS gives
// podman global args, for example a storage root of the benchmark's own.
func BenchmarkStartContainers(b *testing.B) {
	pm, mark := podmanForBench(b)
	ctx := context.Background()
	var runTime, driverTime, maxRun, maxDriver time.Duration
	for i := range b.N {
		name := fmt.Sprintf("kat-rt-bench-%s-run-%d", mark, i)
		m, _ := testIDMap()
		idmap := fmt.Sprintf("0:%d:%d", m.HostBase, IDMapSize)
		args := append(pm.GlobalArgs(), "run", "-d", "--name", name, "--uidmap", idmap, "--gidmap", idmap,
			"--label", LabelManaged+"=true", "--label", testLabel+"="+mark, baseImage, "sleep", "600")
		start := time.Now()
		if out, err := exec.Command("podman", args...).CombinedOutput(); err != nil {
			b.Fatalf("podman run: %v: %s", err, out)
		}
		d := time.Since(start)
		runTime += d
		maxRun = max(maxRun, d)

		spec := testSpec(mark, fmt.Sprintf("drv-%d", i), "sleep", "600")
		start = time.Now()
		id, err := pm.CreateContainer(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := pm.StartContainer(ctx, id); err != nil {
			b.Fatal(err)
		}
		d = time.Since(start)
		driverTime += d
		maxDriver = max(maxDriver, d)
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(runTime.Milliseconds())/n, "run-ms/op")
	b.ReportMetric(float64(driverTime.Milliseconds())/n, "driver-ms/op")
	b.ReportMetric(float64(driverTime)/float64(runTime), "driver/run")
	b.ReportMetric(float64(maxRun.Milliseconds()), "max-run-ms")
	b.ReportMetric(float64(maxDriver.Milliseconds()), "max-driver-ms")
	removeMarked(b, pm, mark)
}

func podmanForBench(b *testing.B) (*Podman, string) {
	b.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		b.Skip("skipping: podman is not installed (run scripts/install-prereqs.sh as root)")
	}
	if _, err := testIDMap(); err != nil {
		b.Skipf("skipping: %v (scripts/install-prereqs.sh writes it)", err)
	}
	pm := NewPodman(PodmanConfig{ExtraArgs: strings.Fields(os.Getenv("KAT_PODMAN_ARGS"))})
	b.Cleanup(func() { _ = pm.Close() })
	ok, err := pm.ImageExists(context.Background(), baseImage)
	if err != nil || !ok {
		b.Skipf("skipping: image %s is missing (run scripts/build-base-image.sh): %v", baseImage, err)
	}
	mark := strings.ReplaceAll(fmt.Sprint(b.N, "-", randomToken()[:8]), " ", "")
	b.Cleanup(func() { removeMarked(b, pm, mark) })
	return pm, mark
}

func removeMarked(b *testing.B, pm *Podman, mark string) {
	b.Helper()
	ctx := context.Background()
	list, err := pm.ListManagedContainers(ctx, map[string]string{testLabel: mark})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range list {
		if err := pm.RemoveContainer(ctx, c.ID, true); err != nil {
			b.Fatal(err)
		}
	}
}
