package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/quadlet"
)

// BenchmarkApplyWorkloads applies 1,000 distinct workloads through the API to
// a real kat-agent, sequentially and then from 8 concurrent clients, and
// reports workloads applied per second and the leader's RSS before and after.
func BenchmarkApplyWorkloads(b *testing.B) {
	const n = 1000
	for b.Loop() {
		c := StartTestCluster(b)
		client := clientFor(b, c)
		archives := workloadArchives(b, n, "seq")
		rssBefore, err := RSS(c.PID())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for i, a := range archives {
			if _, err := client.ApplyWorkload(context.Background(), "default", "", a, apiclient.ApplyOptions{}); err != nil {
				b.Fatalf("apply %d: %v", i, err)
			}
		}
		seq := time.Since(start)
		rssSeq, _ := RSS(c.PID())

		par := workloadArchives(b, n, "par")
		start = time.Now()
		applyConcurrently(b, client, par, 8)
		parDur := time.Since(start)
		rssAfter, _ := RSS(c.PID())

		ws, err := client.ListWorkloads(context.Background(), "default")
		if err != nil || len(ws) != 2*n {
			b.Fatalf("list after applies: %d workloads, %v; want %d", len(ws), err, 2*n)
		}
		b.ReportMetric(float64(n)/seq.Seconds(), "seq-applies/s")
		b.ReportMetric(float64(n)/parDur.Seconds(), "8x-applies/s")
		b.ReportMetric(float64(rssBefore)/(1<<20), "rss-before-MiB")
		b.ReportMetric(float64(rssSeq)/(1<<20), "rss-after-1000-MiB")
		b.ReportMetric(float64(rssAfter)/(1<<20), "rss-after-2000-MiB")
		fmt.Fprintf(os.Stderr, "apply throughput: %d workloads sequentially in %s (%.0f/s), %d with 8 clients in %s (%.0f/s); leader RSS %.1f MiB before, %.1f MiB after 1000, %.1f MiB after 2000 (GOMAXPROCS %d)\n",
			n, seq.Round(time.Millisecond), float64(n)/seq.Seconds(), n, parDur.Round(time.Millisecond), float64(n)/parDur.Seconds(),
			float64(rssBefore)/(1<<20), float64(rssSeq)/(1<<20), float64(rssAfter)/(1<<20), runtime.GOMAXPROCS(0))
	}
}

func applyConcurrently(b *testing.B, client *apiclient.Client, archives [][]byte, workers int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	next := make(chan []byte)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a := range next {
				if _, err := client.ApplyWorkload(context.Background(), "default", "", a, apiclient.ApplyOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, a := range archives {
		next <- a
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func clientFor(tb testing.TB, c *Cluster) *apiclient.Client {
	tb.Helper()
	var cfg struct {
		Server string `yaml:"server"`
		Token  string `yaml:"token"`
		CA     string `yaml:"certificateAuthorityData"`
	}
	raw, err := os.ReadFile(c.KatcallConfig())
	if err != nil {
		tb.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		tb.Fatal(err)
	}
	client, err := apiclient.New(apiclient.Config{Server: cfg.Server, Token: cfg.Token, CAData: []byte(cfg.CA)})
	if err != nil {
		tb.Fatal(err)
	}
	return client
}

// workloadArchives makes n distinct Service workloads from examples-repo's
// hello, as tar.gz archives.
func workloadArchives(tb testing.TB, n int, prefix string) [][]byte {
	tb.Helper()
	files, err := quadlet.ReadDir(filepath.Join(RepoRoot(), "examples-repo", "default", "hello"), quadlet.DefaultLimits)
	if err != nil {
		tb.Fatal(err)
	}
	out := make([][]byte, 0, n)
	for i := range n {
		f := map[string][]byte{}
		for k, v := range files {
			f[k] = v
		}
		f[quadlet.WorkloadFile] = bytes.Replace(files[quadlet.WorkloadFile], []byte("name: hello"),
			fmt.Appendf(nil, "name: %s-%04d", prefix, i), 1)
		var buf bytes.Buffer
		if err := quadlet.WriteArchive(&buf, f); err != nil {
			tb.Fatal(err)
		}
		out = append(out, buf.Bytes())
	}
	return out
}
