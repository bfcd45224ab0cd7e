package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// value is Value for a test: it fails the test on an error.
func value(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := Value(name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEachFunctionMovesItsFamily calls each recording function and checks
// that exactly its family's series moved by what was recorded. Labels are
// unique to this test, so other tests of the package cannot interfere.
func TestEachFunctionMovesItsFamily(t *testing.T) {
	t.Parallel()
	start := time.Now()
	failed := errors.New("boom")
	tests := []struct {
		name   string
		record func()
		family string
		labels map[string]string
		want   float64
	}{
		{"git fetch success", func() { GitFetched("t-src", start, nil) },
			"kat_gitsync_fetch_duration_seconds", map[string]string{"source": "t-src", "result": ResultSuccess}, 1},
		{"git fetch failure", func() { GitFetched("t-src", start, failed) },
			"kat_gitsync_fetch_duration_seconds", map[string]string{"source": "t-src", "result": ResultFailure}, 1},
		{"git sync superseded", func() { GitSynced("t-src", ResultSuperseded, start) },
			"kat_gitsync_sync_duration_seconds", map[string]string{"source": "t-src", "result": ResultSuperseded}, 1},
		{"webhook received", func() { Webhook("t-hub", "accepted", false); Webhook("t-hub", "bad_signature", true) },
			"kat_webhooks_received_total", map[string]string{"provider": "t-hub"}, 2},
		{"webhook accepted", func() { Webhook("t-lab", "accepted", false) },
			"kat_webhooks_accepted_total", map[string]string{"provider": "t-lab", "outcome": "accepted"}, 1},
		{"webhook refused", func() { Webhook("t-tea", "bad_signature", true); Webhook("t-tea", "bad_signature", true) },
			"kat_webhooks_refused_total", map[string]string{"provider": "t-tea", "reason": "bad_signature"}, 2},
		{"reconcile pass", func() { ReconcilePass("t-loop", start, nil) },
			"kat_reconcile_pass_duration_seconds", map[string]string{"loop": "t-loop", "result": ResultSuccess}, 1},
		{"queue depth", func() { QueueDepth("t-loop", 7) },
			"kat_reconcile_queue_depth", map[string]string{"loop": "t-loop"}, 7},
		{"reconcile latency", func() { ReconcileLatency("t-loop", start) },
			"kat_reconcile_latency_seconds", map[string]string{"loop": "t-loop"}, 1},
		{"instances", func() { SetInstances("t-node", map[string]int{"Running": 3, "Failed": 0}) },
			"kat_instances", map[string]string{"node": "t-node", "phase": "Running"}, 3},
		{"secret decrypt failed", func() { SecretDecrypted(SecretViaGit, failed) },
			"kat_secret_decrypts_total", map[string]string{"via": SecretViaGit, "result": ResultFailure}, 1},
		{"secret delivered", func() { SecretDelivered(DeliveryDelivered); SecretDelivered(DeliveryForbidden) },
			"kat_secret_deliveries_total", map[string]string{"result": DeliveryDelivered}, 1},
		{"secret fetched", func() { SecretFetched(nil) },
			"kat_secret_fetches_total", map[string]string{"result": ResultSuccess}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := value(t, tc.family, tc.labels)
			tc.record()
			if got := value(t, tc.family, tc.labels) - before; got != tc.want {
				t.Errorf("%s%v moved by %v, want %v", tc.family, tc.labels, got, tc.want)
			}
		})
	}
}

// TestBuildsAndLeadership covers the families without a label a test can
// own; it is not parallel, so no other test records builds or leadership
// meanwhile.
func TestBuildsAndLeadership(t *testing.T) {
	built := value(t, "kat_build_duration_seconds", map[string]string{"result": ResultBuilt})
	BuildFinished(ResultBuilt, 3*time.Second)
	if got := value(t, "kat_build_duration_seconds", map[string]string{"result": ResultBuilt}) - built; got != 1 {
		t.Errorf("builds moved by %v, want 1", got)
	}
	elected := value(t, "kat_leader_changes_total", map[string]string{"change": ChangeElected})
	lost := value(t, "kat_leader_changes_total", map[string]string{"change": ChangeLost})
	LeaderChanged(true)
	if testutil.ToFloat64(isLeader) != 1 {
		t.Error("kat_leader is not 1 after the node became leader")
	}
	LeaderChanged(false)
	if testutil.ToFloat64(isLeader) != 0 {
		t.Error("kat_leader is not 0 after the node stopped leading")
	}
	if got := value(t, "kat_leader_changes_total", map[string]string{"change": ChangeElected}) - elected; got != 1 {
		t.Errorf("elected changes moved by %v, want 1", got)
	}
	if got := value(t, "kat_leader_changes_total", map[string]string{"change": ChangeLost}) - lost; got != 1 {
		t.Errorf("lost changes moved by %v, want 1", got)
	}
}

func TestEtcdStatusIsReadAtScrapeAndCleared(t *testing.T) {
	if n := testutil.CollectAndCount(etcd); n != 0 {
		t.Fatalf("without a source the etcd collector gave %d metrics, want none", n)
	}
	members := 1
	clear := SetEtcdStatus(func() EtcdStatus {
		return EtcdStatus{IsLeader: true, HasLeader: true, DBSizeBytes: 4096, DBSizeInUseBytes: 2048, Members: members}
	})
	want := `
# HELP kat_etcd_members Members of the etcd cluster, learners included, as this node's member sees it.
# TYPE kat_etcd_members gauge
kat_etcd_members 3
# HELP kat_etcd_is_leader 1 when the etcd member this node runs is the raft leader, else 0.
# TYPE kat_etcd_is_leader gauge
kat_etcd_is_leader 1
`
	members = 3 // read at the scrape, not when the source was set
	if err := testutil.CollectAndCompare(etcd, strings.NewReader(want), "kat_etcd_members", "kat_etcd_is_leader"); err != nil {
		t.Error(err)
	}
	// A source set later wins, and the first one's clear leaves it alone.
	clearOther := SetEtcdStatus(func() EtcdStatus { return EtcdStatus{Members: 5} })
	clear()
	if v := value(t, "kat_etcd_members", nil); v != 5 {
		t.Errorf("kat_etcd_members = %v after a stale clear, want 5", v)
	}
	clearOther()
	if n := testutil.CollectAndCount(etcd); n != 0 {
		t.Errorf("after clear the etcd collector gave %d metrics, want none", n)
	}
}

func TestHandlerServesTextFormat(t *testing.T) {
	t.Parallel()
	GitSynced("t-handler", ResultSuccess, time.Now())
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body := string(b)
	for _, want := range []string{
		`kat_gitsync_sync_duration_seconds_count{result="success",source="t-handler"} 1`,
		"# TYPE kat_leader gauge", "# TYPE kat_leader_changes_total counter",
		"go_goroutines ", "process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "etcd_server_") {
		t.Error("/metrics serves etcd's own families of the default registry")
	}
}

// TestEveryFamilyIsDocumented: the README's Metrics section names every
// kat_ family, each prefixed kat_.
func TestEveryFamilyIsDocumented(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc)
	go func() {
		defer close(ch)
		for _, c := range katCollectors {
			c.Describe(ch)
		}
	}()
	n := 0
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		if !strings.HasPrefix(m[1], "kat_") {
			t.Errorf("%s is not prefixed kat_", m[1])
		}
		if !strings.Contains(string(readme), "| `"+m[1]+"` |") {
			t.Errorf("README.md's Metrics table lacks %s", m[1])
		}
	}
	if n < 18 {
		t.Errorf("described %d families, want every one of them", n)
	}
}

// BenchmarkRecord measures what one recording costs the instrumented code.
func BenchmarkRecord(b *testing.B) {
	start := time.Now()
	b.Run("histogram", func(b *testing.B) {
		for b.Loop() {
			ReconcilePass("bench", start, nil)
		}
	})
	b.Run("counters", func(b *testing.B) {
		for b.Loop() {
			Webhook("bench", "bad_signature", true)
		}
	})
}

// BenchmarkScrape measures one scrape of the whole registry.
func BenchmarkScrape(b *testing.B) {
	h := Handler()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		b.SetBytes(int64(rec.Body.Len()))
	}
}
