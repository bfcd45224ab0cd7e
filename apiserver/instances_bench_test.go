package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

// benchCluster writes a workload "web" with 50 instances on node n0 and,
// beside it, 500 instances of 50 other workloads across ten more nodes,
// each assignment with its generation's files, and every node's status
// reporting its instances running.
func benchCluster(b *testing.B) *fixture {
	b.Helper()
	ctx := context.Background()
	f := newFixture(b, nil)
	if _, err := f.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: mustParse(b, workloadKat("web", "default", 50))}); err != nil {
		b.Fatal(err)
	}
	// A workload directory of a few files, as an assignment carries them.
	files := map[string][]byte{
		"workload.kat": []byte(workloadKat("app", "default", 10)),
		"build.kat":    []byte(strings.Repeat("# a build definition line\n", 40)),
		"config.env":   []byte(strings.Repeat("KEY=value\n", 100)),
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reports := map[string][]api.InstanceStatus{}
	var as []api.Assignment
	add := func(node, workload string, i int) {
		id := fmt.Sprintf("%s-0123abcd-%03d", workload, i)
		as = append(as, api.Assignment{InstanceID: id, Node: node, Namespace: "default", Workload: workload,
			Type: "Service", Generation: 1, SpecHash: "s", TemplateHash: "t", Image: "localhost/kat-base:latest",
			RestartPolicy: "Always", Files: files, CreatedAt: created})
		reports[node] = append(reports[node], api.InstanceStatus{InstanceID: id, ContainerID: "c-" + id, State: "running",
			Phase: api.InstanceRunning, HealthStatus: api.HealthHealthy, Image: "localhost/kat-base:latest"})
	}
	for i := range 50 {
		add("n0", "web", i)
	}
	for i := range 500 {
		add(fmt.Sprintf("n%d", 1+i%10), fmt.Sprintf("other%02d", i/10), i%10)
	}
	if _, err := f.repo.WriteAssignments(ctx, as, nil); err != nil {
		b.Fatal(err)
	}
	for i := range 11 {
		node := fmt.Sprintf("n%d", i)
		if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: node, UID: "u" + node, AdvertiseAddress: "10.0.0.1",
			APIPort: 9115, AgentPort: 9116, JoinedAt: created}); err != nil {
			b.Fatal(err)
		}
		if err := f.repo.PutNodeStatus(ctx, api.NodeStatus{NodeName: node, Timestamp: created.Unix(), WorkloadInstances: reports[node]}); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// benchGet serves GET path b.N times through the server's handler (no TLS,
// no client) and fails on any answer but 200.
func benchGet(b *testing.B, f *fixture, path string) {
	b.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("GET %s = %d: %s", path, w.Code, w.Body)
		}
	}
}

// BenchmarkWorkloadStatus is one look at a workload's status: 50 instances
// on one node, among 550 assignments on 11 nodes.
func BenchmarkWorkloadStatus(b *testing.B) {
	f := benchCluster(b)
	benchGet(b, f, "/v1alpha1/n/default/workloads/web/status")
}

// BenchmarkClusterStatus is one look at the cluster (katcall status) of the
// same cluster.
func BenchmarkClusterStatus(b *testing.B) {
	f := benchCluster(b)
	benchGet(b, f, "/v1alpha1/status")
}
