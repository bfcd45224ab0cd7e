package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestAgentVerifyCommandWithPodman runs DaemonService instances whose
// updateStrategy has a verify command on real Podman: the command runs
// inside the container once it runs (it sees the container's environment)
// and is reported Passed on exit 0, a non-zero exit is
// reported Failed with its status and output, and a command outliving its
// timeout is killed and reported Failed.
func TestAgentVerifyCommandWithPodman(t *testing.T) {
	pm, ids := podmanForAgentTest(t)
	mark := randomHex(t)
	node, cluster := "it-verify-"+mark, "cluster-"+mark
	const testLabel = "kat.test"
	t.Cleanup(func() { removeMarked(t, pm, testLabel, mark) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	repo := resources.New(storetest.New(t))
	slot := int(ids.Slots()/3) + 1 // apart from the other agent tests' slots
	workload := func(name, verify string) map[string][]byte {
		return map[string][]byte{
			"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: ` + name + `, namespace: ns1}
spec:
  type: DaemonService
  source: {image: ` + baseImage + `}
  updateStrategy: {verify: ` + verify + `}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/sleep", "100000"]
    env: [{name: WHERE, value: inside}]
    stopGracePeriodSeconds: 0
`),
		}
	}
	cases := map[string]struct {
		verify, want, message string
	}{
		"passes": {verify: `{command: ["/bin/sh", "-c", "test \"$WHERE\" = inside && echo fine"]}`, want: api.VerifyPassed},
		"fails": {verify: `{command: ["/bin/sh", "-c", "echo the check broke >&2; exit 3"]}`, want: api.VerifyFailed,
			message: "exit 3: the check broke"},
		"hangs": {verify: `{command: ["/bin/sleep", "60"], timeoutSeconds: 1}`, want: api.VerifyFailed,
			message: "still running after 1s: killed"},
	}
	var put []api.Assignment
	for name, tc := range cases {
		files := workload(name, tc.verify)
		if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		put = append(put, api.Assignment{InstanceID: name + "-" + mark, Node: node, Namespace: "ns1", Workload: name,
			Type: quadlet.TypeDaemonService, SpecHash: "h", Generation: 1, Image: baseImage, RestartPolicy: quadlet.RestartAlways,
			Files: files, UserNSSlot: &slot, CreatedAt: time.Now()})
	}
	if _, err := repo.WriteAssignments(ctx, put, nil); err != nil {
		t.Fatal(err)
	}
	ag, _, stop := runPodmanAgent(t, AgentConfig{Repo: repo, Node: node, ClusterUID: cluster, Runtime: pm,
		Resync: time.Second, Tick: 100 * time.Millisecond}, NewSpecBuilder(node, t.TempDir(), &ids), testLabel, mark)
	defer stop()

	start := time.Now()
	polltest.UntilErr(t, 2*time.Minute, "every verify command judged", func() error {
		if n := len(ag.Instances()); n != len(cases) {
			return fmt.Errorf("%d instances assigned", n)
		}
		for _, is := range ag.Instances() {
			if is.Verification == api.VerifyPending || is.Verification == "" {
				return fmt.Errorf("%s: phase %s, health %s, verification %q", is.InstanceID, is.Phase, is.HealthStatus, is.Verification)
			}
		}
		return nil
	})
	t.Logf("verify commands judged %s after the agent started", time.Since(start).Round(time.Millisecond))
	if n := len(ag.Instances()); n != len(cases) {
		t.Fatalf("%d instances, want %d", n, len(cases))
	}
	for _, is := range ag.Instances() {
		tc := cases[is.WorkloadName]
		if is.Verification != tc.want || !strings.HasPrefix(is.VerifyMessage, tc.message) {
			t.Errorf("%s: verification %s %q, want %s %q", is.WorkloadName, is.Verification, is.VerifyMessage, tc.want, tc.message)
		}
		if is.Phase != api.InstanceRunning {
			t.Errorf("%s: phase %s, want Running: a verify command never stops the instance", is.WorkloadName, is.Phase)
		}
	}
}
