package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// rollWorkload is a 3-replica Service of busybox httpd on port serving
// "version" with an exec health check; a broken one's health check probes a
// port nothing listens on, so it never gets healthy.
func rollWorkload(name string, port int, version string, broken bool, deadline int) map[string]string {
	probe := port
	if broken {
		probe = port + 1
	}
	strategy := ""
	if deadline > 0 {
		strategy = fmt.Sprintf("  updateStrategy:\n    progressDeadlineSeconds: %d\n", deadline)
	}
	return map[string]string{
		"workload.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: default
spec:
  type: Service
  replicas: 3
%s  source:
    image: localhost/kat-base:latest
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "mkdir -p /www && echo %s > /www/index.html && exec httpd -f -p %d -h /www"]
    stopGracePeriodSeconds: 1
`, name, strategy, version, port),
		"VirtualLoadBalancer.kat": fmt.Sprintf(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: %d
  healthCheck:
    exec:
      command: ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:%d/"]
    periodSeconds: 1
    timeoutSeconds: 10
`, port, probe),
	}
}

// katcallFile is what tests read of a cluster's katcall.yaml.
type katcallFile struct {
	Server string `yaml:"server"`
	Token  string `yaml:"token"`
	CA     string `yaml:"certificateAuthorityData"`
}

// readKatcallConfig reads the cluster's katcall.yaml.
func readKatcallConfig(t *testing.T, c *Cluster) katcallFile {
	t.Helper()
	b, err := os.ReadFile(c.KatcallConfig())
	if err != nil {
		t.Fatal(err)
	}
	var cfg katcallFile
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// apiClient is an API client with the cluster's katcall configuration.
func apiClient(t *testing.T, c *Cluster) *apiclient.Client {
	t.Helper()
	cfg := readKatcallConfig(t, c)
	cl, err := apiclient.New(apiclient.Config{Server: cfg.Server, Token: cfg.Token, CAData: []byte(cfg.CA)})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// listFollower is a client that sends requests without pause to the ready
// instances of a workload, as the API lists them (refreshed every 100 ms),
// and retries nothing: every failed request counts.
type listFollower struct {
	served, failed atomic.Int64
	mu             sync.Mutex
	bodies         map[string]int
	firstFailure   string
}

func followList(ctx context.Context, t *testing.T, cl *apiclient.Client, ns, name string) (*listFollower, func()) {
	t.Helper()
	f := &listFollower{bodies: map[string]int{}}
	var eps atomic.Pointer[[]string]
	var seen atomic.Pointer[string]
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	refresh := func() {
		d, err := cl.WorkloadStatus(ctx, ns, name)
		if err != nil {
			return // keep the last list
		}
		var list, desc []string
		for _, in := range d.Instances {
			desc = append(desc, fmt.Sprintf("%s gen %d %s/%s ready=%v leaving=%v", in.InstanceID, in.Generation, in.Status.Phase, in.Status.HealthStatus, in.Ready, in.Leaving()))
			if !in.Ready {
				continue
			}
			for _, p := range in.Status.Ports {
				list = append(list, "http://127.0.0.1:"+strconv.Itoa(p.HostPort)+"/")
			}
		}
		eps.Store(&list)
		ds := strings.Join(desc, "; ")
		seen.Store(&ds)
	}
	refresh()
	wg.Go(func() {
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
				refresh()
			}
		}
	})
	wg.Go(func() {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for i := 0; ctx.Err() == nil; i++ {
			list := *eps.Load()
			if len(list) == 0 {
				f.fail("no ready instance listed: " + *seen.Load())
				time.Sleep(10 * time.Millisecond)
				continue
			}
			body, err := get(ctx, hc, list[i%len(list)])
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				f.fail(err.Error())
				continue
			}
			f.served.Add(1)
			f.mu.Lock()
			f.bodies[strings.TrimSpace(body)]++
			f.mu.Unlock()
		}
	})
	return f, func() { cancel(); wg.Wait() }
}

func (f *listFollower) fail(why string) {
	f.failed.Add(1)
	f.mu.Lock()
	if f.firstFailure == "" {
		f.firstFailure = why
	}
	f.mu.Unlock()
}

func get(ctx context.Context, hc *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// startRollWorkload applies version v1 and waits until its 3 instances are
// ready.
func startRollWorkload(t *testing.T, c *Cluster, name string, port int) {
	t.Helper()
	if r := c.Katcall(longCtx(t), "apply", "-f", writeWorkload(t, rollWorkload(name, port, "v1", false, 0)), "--wait", "--timeout", "3m"); r.Code != 0 {
		t.Fatalf("apply v1: %s\n%s", r, agentLog(c, 40))
	}
	waitStatus(t, c, "default/"+name, "3 ready instances of v1", func(d *api.WorkloadDetail) bool {
		return d.Status.Phase == api.PhaseReady && d.Status.Ready == 3
	})
}

// TestRollingUpdateServesEveryRequest: during a rolling update of a
// 3-replica web Service with a health check, a client sending requests
// without pause to the ready instances the API lists sees no failed request;
// at the end only the new version answers.
func TestRollingUpdateServesEveryRequest(t *testing.T) {
	requirePodman(t)
	c := StartTestCluster(t)
	port := containerPort(t)
	startRollWorkload(t, c, "roll", port)

	f, stop := followList(context.Background(), t, apiClient(t, c), "default", "roll")
	start := time.Now()
	r := c.Katcall(longCtx(t), "apply", "-f", writeWorkload(t, rollWorkload("roll", port, "v2", false, 0)), "--wait", "--timeout", "4m")
	took := time.Since(start)
	time.Sleep(time.Second) // keep the client going past the last stop
	stop()
	if r.Code != 0 || !strings.Contains(r.Stdout, "generation 2 successfully rolled out") {
		t.Fatalf("apply v2 --wait: %s\n%s", r, agentLog(c, 40))
	}
	t.Logf("rolling update of 3 replicas: %s; %d requests served (%v), %d failed", took.Round(time.Millisecond), f.served.Load(), f.bodies, f.failed.Load())
	if n := f.failed.Load(); n > 0 {
		t.Errorf("%d requests failed during the rolling update; the first: %s", n, f.firstFailure)
	}
	if f.bodies["v1"] == 0 || f.bodies["v2"] == 0 {
		t.Errorf("answers %v: want both versions answering during the update", f.bodies)
	}
	d := waitStatus(t, c, "default/roll", "only v2 instances", func(d *api.WorkloadDetail) bool {
		return d.Status.Ready == 3 && len(d.Instances) == 3
	})
	for _, in := range d.Instances {
		if in.Generation != 2 {
			t.Errorf("instance %s runs generation %d, want 2", in.InstanceID, in.Generation)
		}
	}
	if !strings.Contains(r.Stdout, "generation 2: new 3/3 ready") {
		t.Errorf("apply --wait printed no progress:\n%s", r.Stdout)
	}
}

// TestBrokenVersionRollsBack: a new version whose health check fails is
// rolled back once its progress deadline passes: apply --wait exits 1 naming
// the cause, generation 1's files come back as generation 3, and the old
// version serves every request throughout.
func TestBrokenVersionRollsBack(t *testing.T) {
	requirePodman(t)
	c := StartTestCluster(t)
	port := containerPort(t)
	startRollWorkload(t, c, "broke", port)

	f, stop := followList(context.Background(), t, apiClient(t, c), "default", "broke")
	start := time.Now()
	r := c.Katcall(longCtx(t), "apply", "-f", writeWorkload(t, rollWorkload("broke", port, "v2", true, 15)), "--wait", "--timeout", "4m")
	failedAfter := time.Since(start)
	// katcall may see the failure just before the leader has applied the
	// rollback it announces ("failed: ...; rolling back to generation 1's
	// files") or just after ("rolled back"); rollout status below shows
	// the rollback done.
	if r.Code != 1 || !strings.Contains(r.Stderr, "the rollout of generation 2 rolled back") &&
		!strings.Contains(r.Stderr, "the rollout of generation 2 failed") || !strings.Contains(r.Stderr, "rolling back to generation 1's files") ||
		!strings.Contains(r.Stderr, "generation 2 made no progress for 15s") || !strings.Contains(r.Stderr, "health check") {
		stop()
		t.Fatalf("apply of a broken version --wait: %s\n%s", r, agentLog(c, 40))
	}
	if r := c.Katcall(longCtx(t), "rollout", "status", "default/broke", "--timeout", "3m"); r.Code != 0 ||
		!strings.Contains(r.Stdout, "generation 3 successfully rolled out") {
		stop()
		t.Fatalf("rollout status of the rollback: %s", r)
	}
	rolledBack := time.Since(start)
	time.Sleep(time.Second)
	stop()
	t.Logf("broken version: apply --wait failed after %s, rollback rolled out after %s; %d requests served (%v), %d failed",
		failedAfter.Round(time.Millisecond), rolledBack.Round(time.Millisecond), f.served.Load(), f.bodies, f.failed.Load())
	if n := f.failed.Load(); n > 0 {
		t.Errorf("%d requests failed while the broken version rolled out and back; the first: %s", n, f.firstFailure)
	}
	if len(f.bodies) != 1 || f.bodies["v1"] == 0 {
		t.Errorf("answers %v: want v1 only", f.bodies)
	}
	d := waitStatus(t, c, "default/broke", "generation 3 with the old instances", func(d *api.WorkloadDetail) bool {
		return d.Generation == 3 && d.Status.Ready == 3 && len(d.Instances) == 3
	})
	failedCond := false
	for _, cond := range d.Status.Conditions {
		failedCond = failedCond || (cond.Type == "RolloutFailed" && cond.Status == api.ConditionTrue)
	}
	if !failedCond {
		t.Errorf("no RolloutFailed condition: %+v", d.Status.Conditions)
	}
	for _, in := range d.Instances {
		if in.Generation != 1 {
			t.Errorf("instance %s of generation %d: want the old instances kept", in.InstanceID, in.Generation)
		}
	}
	h := c.Katcall(context.Background(), "history", "default/broke")
	for _, want := range []string{"succeeded", "rolled back", "automatic rollback of 2 to 1's files"} {
		if !strings.Contains(h.Stdout, want) {
			t.Errorf("history lacks %q:\n%s", want, h)
		}
	}
}

// longCtx bounds a katcall that waits for a rollout: longer than its own
// --timeout.
func longCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
