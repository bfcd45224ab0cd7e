package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestAgentWithPodmanLeavesOtherClustersAlone runs an agent on real Podman
// beside containers made by hand with its node's labels: its own orphan
// (this cluster's UID, no assignment) is removed, while one of another
// cluster (labelled with the very instance the agent is assigned) and one
// from before the cluster label survive its resyncs, running; the agent
// runs its assigned instance in a container of its own, labelled with its
// cluster's UID.
func TestAgentWithPodmanLeavesOtherClustersAlone(t *testing.T) {
	pm, ids := podmanForAgentTest(t)
	mark := randomHex(t)
	node, cluster := "it-ident-"+mark, "cluster-"+mark
	const testLabel = "kat.test"
	t.Cleanup(func() { removeMarked(t, pm, testLabel, mark) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	slot := int(ids.Slots() / 3) // apart from the runtime and build tests' slots
	idMap, _ := ids.Map(slot)
	instance := "web-" + mark
	byHand := func(name, clusterUID, instance string) string {
		t.Helper()
		labels := map[string]string{testLabel: mark, runtime.LabelManaged: "true", runtime.LabelNode: node,
			runtime.LabelInstance: instance, runtime.LabelStopGrace: "0"}
		if clusterUID != "" {
			labels[runtime.LabelCluster] = clusterUID
		}
		id, err := pm.RunContainer(ctx, runtime.ContainerSpec{Name: "kat-ident-" + mark + "-" + name, Image: baseImage,
			Command: []string{"/bin/sleep", "100000"}, Labels: labels, IDMap: idMap})
		if err != nil {
			t.Fatalf("podman run %s: %v", name, err)
		}
		return id
	}
	foreign := map[string]string{
		byHand("foreign", "other-"+mark, instance): "another cluster's container",
		byHand("legacy", "", instance):             "the container from before the cluster label",
	}
	orphan := byHand("orphan", cluster, "gone-"+mark)

	repo := resources.New(storetest.New(t))
	files := map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source: {image: ` + baseImage + `}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/sleep", "100000"]
    stopGracePeriodSeconds: 0
`)}
	a := api.Assignment{InstanceID: instance, Node: node, Namespace: "ns1", Workload: "web", SpecHash: "h",
		Generation: 1, Image: baseImage, RestartPolicy: quadlet.RestartAlways, Files: files, UserNSSlot: &slot,
		CreatedAt: time.Now()}
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := repo.WriteAssignments(ctx, []api.Assignment{a}, nil); err != nil {
		t.Fatal(err)
	}
	rt := &countingRuntime{Runtime: pm}
	ag, logs, stopAgent := runPodmanAgent(t, AgentConfig{Repo: repo, Node: node, ClusterUID: cluster, Runtime: rt,
		Resync: 500 * time.Millisecond, Tick: 50 * time.Millisecond}, NewSpecBuilder(node, t.TempDir(), &ids), testLabel, mark)
	defer stopAgent()

	var mine string
	polltest.UntilErr(t, 2*time.Minute, "the orphan removed and the instance running", func() error {
		_, err := pm.InspectContainer(ctx, orphan)
		if !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("orphan: inspect: %w", err)
		}
		for _, is := range ag.Instances() {
			if is.Phase == api.InstanceRunning {
				mine = is.ContainerID
				return nil
			}
		}
		return fmt.Errorf("instances %+v", ag.Instances())
	})
	if _, adopted := foreign[mine]; adopted {
		t.Fatalf("the agent adopted %s (%s)", foreign[mine], mine)
	}
	// Let two more resyncs pass over the survivors, then stop: every step
	// the agent started has ended when Run returns.
	lists := rt.lists.Load()
	polltest.Until(t, time.Minute, "two more listings", func() bool { return rt.lists.Load() >= lists+2 })
	stopAgent()

	for id, what := range foreign {
		c, err := pm.InspectContainer(ctx, id)
		if err != nil || c.State != runtime.StateRunning {
			t.Errorf("%s (%s) did not survive: %+v, %v", what, id, c, err)
		}
	}
	c, err := pm.InspectContainer(ctx, mine)
	if err != nil || c.Labels[runtime.LabelCluster] != cluster || c.Labels[runtime.LabelNode] != node {
		t.Errorf("the agent's container %s: %+v, %v; want labels %s=%s and %s=%s", mine, c, err,
			runtime.LabelCluster, cluster, runtime.LabelNode, node)
	}
	for _, want := range []string{"container of another cluster", "container without a cluster label"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the agent did not log %q:\n%s", want, logs.String())
		}
	}
}

// runPodmanAgent runs an agent of cfg whose containers are specs's, each
// labelled key=mark, logging to the returned buffer. The returned stop ends
// it and waits for it; once the test failed, it logs the agent's log.
func runPodmanAgent(t *testing.T, cfg AgentConfig, specs SpecBuilder, key, mark string) (*Agent, *testenv.SyncBuffer, func()) {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	cfg.Logger = zerolog.New(logs)
	cfg.BuildSpec = func(a api.Assignment, q *quadlet.Quadlet, in SpecInputs) (runtime.ContainerSpec, error) {
		spec, err := specs(a, q, in)
		if err == nil {
			spec.Labels[key] = mark
		}
		return spec, err
	}
	ag, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ag.Run(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	return ag, logs, sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
}

// countingRuntime counts the listings of the runtime it wraps.
type countingRuntime struct {
	Runtime
	lists atomic.Int64
}

func (r *countingRuntime) ListManagedContainers(ctx context.Context, labels map[string]string) ([]runtime.ContainerStatus, error) {
	defer r.lists.Add(1)
	return r.Runtime.ListManagedContainers(ctx, labels)
}

// baseImage is the image the Podman tests run; scripts/build-base-image.sh
// builds it.
const baseImage = "localhost/kat-base:latest"

// podmanForAgentTest returns a driver on the machine's Podman storage (or
// KAT_PODMAN_ARGS's global args) and the containers sub-id range, skipping
// the test when Podman, the base image or the range is missing.
func podmanForAgentTest(t testing.TB) (*runtime.Podman, runtime.SubIDRange) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping podman integration test in -short mode")
	}
	if _, err := exec.LookPath("podman"); err != nil {
		testenv.SkipOrFail(t, "skipping: podman is not installed (run scripts/install-prereqs.sh as root)")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: podman integration tests run as root")
	}
	ids, err := runtime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	if err != nil {
		testenv.SkipOrFail(t, "skipping: %v (scripts/install-prereqs.sh writes it)", err)
	}
	pm := runtime.NewPodman(runtime.PodmanConfig{ExtraArgs: strings.Fields(os.Getenv("KAT_PODMAN_ARGS"))})
	t.Cleanup(func() { // after the test's own cleanups, which use it
		if err := pm.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok, err := pm.ImageExists(ctx, baseImage)
	if err != nil {
		testenv.SkipOrFail(t, "skipping: podman does not work here: %v", err)
	}
	if !ok {
		testenv.SkipOrFail(t, "skipping: image %s is missing (run scripts/build-base-image.sh)", baseImage)
	}
	return pm, ids
}

// removeMarked removes every managed container whose label key is mark.
func removeMarked(t testing.TB, pm *runtime.Podman, key, mark string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := pm.ListManagedContainers(ctx, map[string]string{key: mark})
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	for _, c := range list {
		if err := pm.RemoveContainer(ctx, c.ID, true); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("cleanup: %v", err)
		}
	}
}

func randomHex(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
