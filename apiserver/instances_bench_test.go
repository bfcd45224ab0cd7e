package apiserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/reconcile/leader"
	"kat.dws.rip/kat/store/resources"
)

// benchCluster writes a workload "web" with 50 instances on node n0 and,
// beside it, 500 instances of 50 other workloads across ten more nodes,
// each assignment with its generation's files, and every node's status
// reporting its instances running. mod, when not nil, changes the
// server's configuration.
func benchCluster(b testing.TB, mod func(*apiserver.Config)) *fixture {
	b.Helper()
	ctx := context.Background()
	f := newFixture(b, mod)
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
	f := benchCluster(b, nil)
	benchGet(b, f, "/v1alpha1/n/default/workloads/web/status")
}

// BenchmarkWorkloadStatusFromView is BenchmarkWorkloadStatus with the
// instances read from the leader's watch-fed view, as the leader's API
// server reads them.
func BenchmarkWorkloadStatusFromView(b *testing.B) {
	var v leaderView
	f := benchCluster(b, v.wire(b))
	v.run(b)
	benchGet(b, f, "/v1alpha1/n/default/workloads/web/status")
}

// TestWorkloadStatusFromTheLeadersView: a look at a workload's status
// answers the same from the leader's view as from etcd.
func TestWorkloadStatusFromTheLeadersView(t *testing.T) {
	t.Parallel()
	var v leaderView
	f := benchCluster(t, v.wire(t))
	v.run(t)
	fromEtcd, err := apiserver.New(apiserver.Config{Repo: f.repo, AdminTokenHash: resources.HashToken(token), RateLimit: -1})
	if err != nil {
		t.Fatal(err)
	}
	get := func(h http.Handler) string {
		req := httptest.NewRequest(http.MethodGet, "/v1alpha1/n/default/workloads/web/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("status: %d %s", w.Code, w.Body)
		}
		return w.Body.String()
	}
	if view, etcd := get(f.handler), get(fromEtcd.Handler()); view != etcd || !strings.Contains(view, `"phase": "Running"`) {
		t.Errorf("from the view:\n%s\nfrom etcd:\n%s", view, etcd)
	}
}

// leaderView wires a leader's view (its caches, no pass) into an API
// server's configuration, as a leader's API server has it.
type leaderView struct{ l *leader.Leader }

// wire returns a fixture's mod that sets WorkloadInstances to a new
// leader's.
func (v *leaderView) wire(tb testing.TB) func(*apiserver.Config) {
	tb.Helper()
	return func(c *apiserver.Config) {
		l, err := leader.New(leader.Config{Repo: c.Repo})
		if err != nil {
			tb.Fatal(err)
		}
		v.l, c.WorkloadInstances = l, l.WorkloadInstances
	}
}

// run starts the view's caches until the test ends and waits until they
// hold web's 50 instances with their reports (benchCluster).
func (v *leaderView) run(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })
	for _, lp := range v.l.Loops() {
		if lp.Name == "view" { // the caches only: no pass writes anything
			wg.Go(func() {
				if err := lp.Run(ctx); err != nil {
					tb.Error(err)
				}
			})
		}
	}
	polltest.Until(tb, 10*time.Second, "the view holds web's 50 instances, reported", func() bool {
		as, reports, ok := v.l.WorkloadInstances("default", "web")
		return ok && len(as) == 50 && len(reports) == 50
	})
}

// BenchmarkClusterStatus is one look at the cluster (katcall status) of the
// same cluster.
func BenchmarkClusterStatus(b *testing.B) {
	f := benchCluster(b, nil)
	benchGet(b, f, "/v1alpha1/status")
}
