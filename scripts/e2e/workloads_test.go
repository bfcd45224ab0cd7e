package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
)

// requirePodman skips the test unless podman and localhost/kat-base are
// there (scripts/install-prereqs.sh and scripts/build-base-image.sh install
// them; CI runs both).
func requirePodman(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("podman"); err != nil {
		skipOrFail(t, "podman is not installed: run scripts/install-prereqs.sh (as root) to run this test")
	}
	if err := exec.Command("podman", "image", "exists", "localhost/kat-base:latest").Run(); err != nil {
		skipOrFail(t, "the image localhost/kat-base:latest is missing: run scripts/build-base-image.sh to run this test")
	}
}

// writeWorkload writes a workload directory and returns its path.
func writeWorkload(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// webWorkload is a Service of busybox httpd on port with an exec health
// check. Tests pick an unusual port: the first replica publishes it on the
// host as is, where a common one (8080) may be taken or hold stale NAT rules.
func webWorkload(name string, replicas, port int) map[string]string {
	return map[string]string{
		"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  replicas: %d
  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "mkdir -p /www && echo hello from $HOSTNAME > /www/index.html && echo web started && exec httpd -f -p %[3]d -h /www"]
`, name, replicas, port),
		"VirtualLoadBalancer.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: %[1]d
  healthCheck:
    exec:
      command: ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:%[1]d/"]
    periodSeconds: 1
`, port),
	}
}

// volumeWorkload is two replicas sharing a SimpleClusterStorage volume.
func volumeWorkload(name string) map[string]string {
	return map[string]string{"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  replicas: 2
  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "exec sleep 100000"]
    volumeMounts:
      - name: data
        mountPath: /data
  volumes:
    - name: data
      simpleClusterStorage: {}
`, name)}
}

func failingWorkload(name string) map[string]string {
	return map[string]string{"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  replicas: 1
  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: MaxCount
    maxRestarts: 2
    resetSeconds: 3600
  container:
    command: ["/bin/sh", "-c", "echo failing; exit 1"]
`, name)}
}

// workloadStatus runs katcall status NS/NAME -o json.
func workloadStatus(t testing.TB, c *Cluster, ref string) (*api.WorkloadDetail, error) {
	t.Helper()
	r := c.Katcall(context.Background(), "status", ref, "-o", "json")
	if r.Code != 0 {
		return nil, fmt.Errorf("katcall status %s: %s", ref, r)
	}
	var d api.WorkloadDetail
	if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
		return nil, fmt.Errorf("decode katcall status %s: %w\n%s", ref, err, r.Stdout)
	}
	return &d, nil
}

// waitStatus polls the workload's status until cond holds (2 minutes at
// most) and returns it.
func waitStatus(t testing.TB, c *Cluster, ref, what string, cond func(*api.WorkloadDetail) bool) *api.WorkloadDetail {
	t.Helper()
	return waitStatusUntil(t, c, ref, what, time.Now().Add(2*time.Minute), cond)
}

// waitStatusUntil is waitStatus with a deadline of the caller's.
func waitStatusUntil(t testing.TB, c *Cluster, ref, what string, deadline time.Time, cond func(*api.WorkloadDetail) bool) *api.WorkloadDetail {
	t.Helper()
	return waitFor(t, c, ref, what, deadline, func() (*api.WorkloadDetail, error) { return workloadStatus(t, c, ref) }, cond)
}

// waitFor polls get until cond holds of what it returns, or deadline, and
// returns the last value; on a timeout it fails the test with that value
// (as JSON) and the end of the agent's log, naming ref and what.
func waitFor[T any](t testing.TB, c *Cluster, ref, what string, deadline time.Time, get func() (T, error), cond func(T) bool) T {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var last T
	err := poll.Wait(ctx, func() (bool, error) {
		v, err := get()
		if err == nil {
			last = v
		}
		return err == nil && cond(v), err
	})
	if err != nil {
		b, _ := json.MarshalIndent(last, "", "  ")
		t.Fatalf("%s: timed out waiting for %s (%v); last seen:\n%s\nagent log:\n%s", ref, what, err, b, agentLog(c, 40))
	}
	return last
}

// containerIDs lists the IDs of the workload's containers in Podman.
func containerIDs(t testing.TB, node, workload string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", "ps", "-a", "--no-trunc", "--format", "{{.ID}}",
		"--filter", "label=kat.node="+node, "--filter", "label=kat.workload="+workload).Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	ids := strings.Fields(string(out))
	slices.Sort(ids)
	return ids
}

func podman(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func httpGet(url string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestAgentRunsWorkloads proves issue 3's "Done when" with real Podman: a
// Service of 2 replicas of busybox httpd reaches ready 2 and answers on its
// published ports; podman kill brings a restart (same container, restarts 1)
// and its SimpleClusterStorage volume keeps a file; kill -9 of kat-agent and a
// restart leave every container ID (and start time) unchanged; replicas 1
// removes one container; a MaxCount workload that exits 1 becomes Failed after
// maxRestarts; deleting workloads removes their containers.
func TestAgentRunsWorkloads(t *testing.T) {
	requirePodman(t)
	c, err := NewCluster(sharedBinaries(t), t.TempDir(), filepath.Join(RepoRoot(), "scripts", "e2e", "testdata", "cluster.kat"))
	if err != nil {
		t.Fatal(err)
	}
	volumes := t.TempDir()
	c.ExtraArgs = []string{"--volume-base-path", volumes}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.Running() {
			if err := c.Stop(30 * time.Second); err != nil {
				t.Errorf("stop kat-agent: %v", err)
			}
		}
		if err := RemoveNodeContainers(c.Node); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	web, vol := "web-"+randomHex(3), "vol-"+randomHex(3)
	ref := "default/" + web
	port := containerPort(t)
	mustApply(t, c, writeWorkload(t, webWorkload(web, 2, port)))
	mustApply(t, c, writeWorkload(t, volumeWorkload(vol)))

	// Ready 2, each instance answering on its published port.
	d := waitStatus(t, c, ref, "ready 2/2", func(d *api.WorkloadDetail) bool {
		return d.Status.Ready == 2 && d.Status.Phase == "Ready" && len(d.Instances) == 2
	})
	for _, in := range d.Instances {
		if in.Status.State != "running" || in.Status.HealthStatus != "healthy" || in.Status.ContainerID == "" || in.Node != c.Node ||
			in.Image != "localhost/kat-base:latest" || len(in.Status.Ports) != 1 {
			t.Fatalf("instance %+v: want running, healthy, with a container and one published port", in)
		}
		body, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/", in.Status.Ports[0].HostPort))
		if err != nil || !strings.Contains(body, "hello from") {
			t.Fatalf("GET on the published port %d of %s: %q, %v", in.Status.Ports[0].HostPort, in.InstanceID, body, err)
		}
	}
	if r := c.Katcall(context.Background(), "logs", ref, "--instance", d.Instances[0].InstanceID); r.Code != 0 || !strings.Contains(r.Stdout, "web started") {
		t.Fatalf("katcall logs: %s", r)
	}
	if r := c.Katcall(context.Background(), "status"); r.Code != 0 || !strings.Contains(r.Stdout, "2/2") {
		t.Fatalf("katcall status does not show 2/2 ready: %s", r)
	}

	// podman kill: the agent restarts the same container.
	victim := d.Instances[0]
	podman(t, "kill", victim.Status.ContainerID)
	d = waitStatus(t, c, ref, "a restart after podman kill", func(d *api.WorkloadDetail) bool {
		for _, in := range d.Instances {
			if in.InstanceID == victim.InstanceID {
				return in.Status.Restarts == 1 && in.Status.State == "running" && d.Status.Ready == 2
			}
		}
		return false
	})
	for _, in := range d.Instances {
		if in.InstanceID == victim.InstanceID && in.Status.ContainerID != victim.Status.ContainerID {
			t.Fatalf("the restart replaced container %s by %s", victim.Status.ContainerID, in.Status.ContainerID)
		}
	}

	// Both replicas of a workload can write its SimpleClusterStorage volume
	// (they share the workload's uid range), and it keeps a file across a
	// container restart.
	vd := waitStatus(t, c, "default/"+vol, "ready 2/2", func(d *api.WorkloadDetail) bool { return d.Status.Ready == 2 && len(d.Instances) == 2 })
	var maps []string
	for _, in := range vd.Instances {
		podman(t, "exec", in.Status.ContainerID, "sh", "-c", "echo "+in.InstanceID+" > /data/"+in.InstanceID)
		maps = append(maps, strings.Join(strings.Fields(podman(t, "exec", in.Status.ContainerID, "cat", "/proc/self/uid_map")), " "))
	}
	if maps[0] != maps[1] || !strings.HasSuffix(maps[0], " 65536") {
		t.Fatalf("replicas' uid maps %q: want one 65536-id map for both", maps)
	}
	volInst, volID := vd.Instances[0].InstanceID, vd.Instances[0].Status.ContainerID
	podman(t, "exec", volID, "sh", "-c", "echo kept > /data/file")
	podman(t, "kill", volID)
	waitStatus(t, c, "default/"+vol, "a restart of the volume's container", func(d *api.WorkloadDetail) bool {
		for _, in := range d.Instances {
			if in.InstanceID == volInst {
				return in.Status.Restarts == 1 && in.Status.State == "running"
			}
		}
		return false
	})
	if got := podman(t, "exec", volID, "cat", "/data/file"); got != "kept" {
		t.Fatalf("after the restart /data/file = %q, want kept", got)
	}
	if b, err := os.ReadFile(filepath.Join(volumes, "default", vol, "data", "file")); err != nil || string(b) != "kept\n" {
		t.Fatalf("volume on the host: %q, %v", b, err)
	}

	// kill -9 of kat-agent and a restart: the containers are adopted, not
	// restarted.
	ids := containerIDs(t, c.Node, web)
	started := map[string]string{}
	for _, id := range ids {
		started[id] = podman(t, "inspect", "--format", "{{.State.StartedAt}}", id)
	}
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, ref, "ready 2/2 reported by the new agent", func(d *api.WorkloadDetail) bool {
		return d.Status.Ready == 2 && d.Instances[0].Status.Restarts+d.Instances[1].Status.Restarts == 1 &&
			lastHeartbeat(t, c).After(restarted.Add(3*time.Second))
	})
	if after := containerIDs(t, c.Node, web); !slices.Equal(after, ids) {
		t.Fatalf("container IDs changed across the agent restart: %v, then %v", ids, after)
	}
	for _, id := range ids {
		if s := podman(t, "inspect", "--format", "{{.State.StartedAt}}", id); s != started[id] {
			t.Fatalf("container %s was restarted by the agent restart: started %s, then %s", id, started[id], s)
		}
	}

	// Replicas 1 removes one container.
	mustApply(t, c, writeWorkload(t, webWorkload(web, 1, port)))
	waitStatus(t, c, ref, "one instance", func(d *api.WorkloadDetail) bool {
		return d.Status.Desired == 1 && d.Status.Ready == 1 && len(d.Instances) == 1 && len(containerIDs(t, c.Node, web)) == 1
	})
	if left := containerIDs(t, c.Node, web); !slices.Contains(ids, left[0]) {
		t.Fatalf("scaling down replaced the containers: %v left, had %v", left, ids)
	}

	// MaxCount: exit 1 becomes Failed after maxRestarts.
	bad := "fail-" + randomHex(3)
	mustApply(t, c, writeWorkload(t, failingWorkload(bad)))
	d = waitStatus(t, c, "default/"+bad, "Failed", func(d *api.WorkloadDetail) bool {
		return d.Status.Phase == "Failed" && len(d.Instances) == 1 && d.Instances[0].Status.Phase == "Failed"
	})
	if d.Instances[0].Status.Restarts != 2 || d.Status.LastError == "" {
		t.Fatalf("failed instance %+v, lastError %q: want 2 restarts and an error", d.Instances[0], d.Status.LastError)
	}

	// Delete removes every container.
	for _, name := range []string{web, bad, vol} {
		if r := c.Katcall(context.Background(), "delete", "workload", "default/"+name); r.Code != 0 {
			t.Fatalf("delete %s: %s", name, r)
		}
	}
	polltest.UntilErr(t, 2*time.Minute, "every container removed after delete", func() error {
		left := slices.Concat(containerIDs(t, c.Node, web), containerIDs(t, c.Node, bad), containerIDs(t, c.Node, vol))
		if len(left) == 0 {
			return nil
		}
		return fmt.Errorf("left: %v\n%s", left, c.Tail(30))
	})
}

// agentLog returns the last n lines of the agent's log other than API
// request lines.
func agentLog(c *Cluster, n int) string {
	b, _ := os.ReadFile(c.LogPath())
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, `"api request"`) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// lastHeartbeat returns the time of the cluster node's last heartbeat.
func lastHeartbeat(t testing.TB, c *Cluster) time.Time {
	t.Helper()
	r := c.Katcall(context.Background(), "get", "nodes", "-o", "json")
	var nodes []api.Node
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &nodes) != nil || len(nodes) != 1 || nodes[0].LastHeartbeat == nil {
		return time.Time{}
	}
	return *nodes[0].LastHeartbeat
}

var skipOrFail = testenv.SkipOrFail
