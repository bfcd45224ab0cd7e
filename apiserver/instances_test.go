package apiserver_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/store/resources"
)

func TestWorkloadInstancesStatusAndLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newAgentFixture(t, apiserver.AgentConfig{
		Logs: func(_ context.Context, id string, opts api.LogOptions, w io.Writer) error {
			if id != "web-1" {
				return fmt.Errorf("%w: %s", apiserver.ErrUnknownInstance, id)
			}
			_, err := fmt.Fprintf(w, "hello from %s follow=%v\n", id, opts.Follow)
			return err
		},
	})
	a := api.Assignment{InstanceID: "web-1", Node: "n1", Namespace: "default", Workload: "web", Image: "img",
		Files: map[string][]byte{"workload.kat": []byte("kind: Workload\n")}, CreatedAt: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)}
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{a}, nil); err != nil {
		t.Fatal(err)
	}
	// The instance shows its assignment (without the files) and, before
	// its agent reports, a pending status.
	shown := a
	shown.Files = nil
	d, err := f.client.WorkloadStatus(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	pending := api.Instance{Assignment: shown, Status: api.InstanceStatus{Phase: api.InstancePending, HealthStatus: api.HealthPending}}
	if len(d.Instances) != 1 || !reflect.DeepEqual(d.Instances[0], pending) {
		t.Fatalf("instances before a report = %+v, want %+v", d.Instances, pending)
	}

	// The node reports its instance; the workload status shows it.
	st := api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), WorkloadInstances: []api.InstanceStatus{{
		InstanceID: "web-1", ContainerID: "c1", State: "running", Phase: api.InstanceRunning,
		HealthStatus: api.HealthHealthy, Restarts: 2, Image: "img"}}}
	if err := f.client.PostNodeStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	if d, err = f.client.WorkloadStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if want := (api.Instance{Assignment: shown, Status: st.WorkloadInstances[0], Ready: true}); len(d.Instances) != 1 || !reflect.DeepEqual(d.Instances[0], want) {
		t.Fatalf("instances = %+v, want %+v", d.Instances, want)
	}

	var buf bytes.Buffer
	if err := f.client.Logs(ctx, "default", "web", "", true, &buf); err != nil || buf.String() != "hello from web-1 follow=true\n" {
		t.Fatalf("logs = %q, %v", buf.String(), err)
	}
	// The answer names the instance whose log it is (the server picked it).
	if code, h := f.header(t, "/v1alpha1/n/default/workloads/web/logs"); code != http.StatusOK || h.Get(api.HeaderInstance) != "web-1" {
		t.Fatalf("logs: %d, %s %q, want 200 and web-1 (header %v)", code, api.HeaderInstance, h.Get(api.HeaderInstance), h)
	}
	if err := f.client.Logs(ctx, "default", "web", "nope", false, &buf); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("logs of an unknown instance: %v, want 404", err)
	}

	// Bad reports change nothing.
	st.NodeName = "other"
	if code, _ := f.raw(t, http.MethodPost, "/v1alpha1/nodes/n1/status", token, mustJSON(t, st)); code != http.StatusBadRequest {
		t.Fatalf("mismatched node name: %d, want 400", code)
	}
	if code, _ := f.raw(t, http.MethodPost, "/v1alpha1/nodes/other/status", token, mustJSON(t, st)); code != http.StatusNotFound {
		t.Fatalf("unregistered node: %d, want 404", code)
	}
	if code, _ := f.raw(t, http.MethodPost, "/v1alpha1/nodes/n1/status", "", []byte("{")); code != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d, want 401", code)
	}
}

func isStatus(err error, code int) bool { return statusOf(err) == code }

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newAgentFixture is a fixture whose server reaches a TLS agent serving
// agent (a node n1 registered at it), with the workload default/web
// applied.
func newAgentFixture(t *testing.T, agent apiserver.AgentConfig) *fixture {
	t.Helper()
	ctx := context.Background()
	agentSrv := httptest.NewUnstartedServer(apiserver.AgentHandler(agent))
	agentSrv.EnableHTTP2 = true
	agentSrv.StartTLS()
	t.Cleanup(agentSrv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(agentSrv.Certificate())
	f := newFixture(t, func(c *apiserver.Config) {
		c.AgentTransport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	})
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(agentSrv.URL, "https://"))
	p, _ := strconv.Atoi(port)
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", AdvertiseAddress: host, AgentPort: p}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "default", 1)}),
		apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	f.agent = agentSrv
	return f
}

// TestHeartbeatWritesStatusOnlyOnChange: a heartbeat that changes nothing
// but its time updates the node's heartbeat and leaves its status record
// alone (so nothing that follows statuses is woken); a changed report is
// written; a node whose registration went is refused at its next beat.
func TestHeartbeatWritesStatusOnlyOnChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", JoinedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	version := func(key string) int64 {
		kv, err := f.st.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return kv.Version
	}
	st := api.NodeStatus{NodeName: "n1", Timestamp: 100, WorkloadInstances: []api.InstanceStatus{{InstanceID: "i1", Phase: api.InstanceRunning}}}
	if err := f.client.PostNodeStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	statusVer, beatVer := version(resources.NodeStatusKey("n1")), version(resources.NodeHeartbeatKey("n1"))
	for ts := int64(101); ts < 105; ts++ {
		st.Timestamp = ts
		if err := f.client.PostNodeStatus(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if v := version(resources.NodeStatusKey("n1")); v != statusVer {
		t.Errorf("unchanged heartbeats rewrote the status (version %d, was %d)", v, statusVer)
	}
	if v := version(resources.NodeHeartbeatKey("n1")); v <= beatVer {
		t.Errorf("heartbeats did not move the heartbeat record")
	}
	nodes, err := f.client.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || nodes[0].LastHeartbeat == nil || nodes[0].LastHeartbeat.Unix() != 104 {
		t.Fatalf("nodes = %+v, %v; want the last heartbeat at 104", nodes, err)
	}
	st.WorkloadInstances[0].Phase = api.InstanceFailed
	if err := f.client.PostNodeStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	if v := version(resources.NodeStatusKey("n1")); v == statusVer {
		t.Error("a changed report was not written")
	}
	if err := f.st.Delete(ctx, resources.NodeRegistrationKey("n1")); err != nil {
		t.Fatal(err)
	}
	if err := f.client.PostNodeStatus(ctx, st); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("heartbeat of a node whose registration went: %v, want 404", err)
	}
}

// TestNodeShowsItsLastReport: a node as the API shows it carries its last
// status report as the node sent it (resources, GPUs, overlay,
// conditions), without its instances.
func TestNodeShowsItsLastReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := context.Background()
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", JoinedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st := api.NodeStatus{NodeName: "n1", Timestamp: 100,
		Resources:         api.NodeResources{Capacity: api.ResourceList{CPU: "2", Memory: "4Gi"}, Allocatable: api.ResourceList{CPU: "1500m", Memory: "3Gi"}},
		GPUs:              []api.GPU{{Index: 0, Name: "gpu0", Driver: "nvidia", VRAMMiB: 8192}},
		Conditions:        []api.Condition{{Type: "RuntimeReady", Status: api.ConditionFalse, Reason: "MissingProgram", Message: "iptables"}},
		Overlay:           &api.NodeOverlay{PublicKey: base64.StdEncoding.EncodeToString(make([]byte, 32)), Port: 51820},
		WorkloadInstances: []api.InstanceStatus{{InstanceID: "i1", Phase: api.InstanceRunning}},
	}
	if err := f.client.PostNodeStatus(ctx, st); err != nil {
		t.Fatal(err)
	}
	n, err := f.client.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := st
	want.WorkloadInstances = nil
	if !reflect.DeepEqual(n.NodeStatus, want) {
		t.Fatalf("node shows the report %+v, want %+v", n.NodeStatus, want)
	}
}
