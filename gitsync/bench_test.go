package gitsync

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/webhook"
)

// BenchmarkGitSync1000 measures, on a 1,000-directory config repo served by
// git http-backend with the state in an embedded etcd (fsync off): the
// initial sync; the latency from a push announced as a webhook would
// (DispatchPush) to the changed workload's new desired state in etcd, p50
// and p95 over 20 commits that each change one directory; and the time and
// bytes of a poll that finds no change. Run it with -benchtime 1x.
func BenchmarkGitSync1000(b *testing.B) {
	const dirs, commits = 1000, 20
	r := newTestRemote(b)
	for i := range dirs {
		r.workload(fmt.Sprintf("apps/w%04d", i), "default", fmt.Sprintf("w%04d", i), 1)
	}
	c1 := r.Commit("1000 workloads", nil)
	srv, url := newGitServer(b, r)
	ctx := context.Background()
	tip, iter := c1, 0 // the remote's head and the iteration: each commits to it
	for b.Loop() {
		iter++
		e := newEnv(b)
		start := time.Now()
		e.addSource(api.SourceSpec{URL: url})
		if st := e.waitApplied("config", tip); st.Workloads != dirs {
			b.Fatalf("initial sync: %d workloads, want %d", st.Workloads, dirs)
		}
		initial := time.Since(start)

		var lat []time.Duration
		for i := range commits {
			name := fmt.Sprintf("w%04d", i*37%dirs)
			events, err := e.repo.Store().Watch(ctx, resources.MetaKey("default", name), 0)
			if err != nil {
				b.Fatal(err)
			}
			r.workload("apps/"+name, "default", name, 1+iter*commits+i) // new at every iteration
			head := r.Commit("change "+name, nil)
			t0 := time.Now()
			n, err := e.m.DispatchPush(ctx, webhook.Push{Provider: "generic", RepoURLs: []string{url}, Ref: "refs/heads/main", After: head})
			if err != nil || n != 1 {
				b.Fatalf("DispatchPush = %d, %v", n, err)
			}
			select {
			case <-events:
				lat = append(lat, time.Since(t0))
			case <-time.After(60 * time.Second):
				b.Fatalf("commit %d not applied within 60s", i)
			}
			e.waitApplied("config", head)
			tip = head
		}
		slices.Sort(lat)

		// A poll that finds no change, by a loop of its own over the same
		// remote (its first round clones and finds every workload as it is).
		src := newSource(Defaulted(api.SourceSpec{Name: "config", URL: url}), e.repo, e.m.cfg.Desired, b.TempDir(), zerolog.Nop(), time.Now)
		src.round(ctx)
		const polls = 20
		bytes0, t0 := srv.Bytes(), time.Now()
		for range polls {
			src.round(ctx)
		}
		pollTime := time.Since(t0) / polls
		pollBytes := float64(srv.Bytes()-bytes0) / polls
		if src.status.LastError != "" {
			b.Fatalf("no-change poll: %s", src.status.LastError)
		}
		_ = src.git.Close()

		b.ReportMetric(initial.Seconds(), "initial-sync-s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
		b.ReportMetric(float64(pollTime.Microseconds())/1000, "noop-poll-ms")
		b.ReportMetric(pollBytes, "noop-poll-bytes")
		b.Logf("initial sync of %d directories: %s; commit-to-desired-state p50 %s p95 %s over %d commits; no-change poll %s, %.0f bytes",
			dirs, initial.Round(time.Millisecond), lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*95/100].Round(time.Microsecond),
			commits, pollTime.Round(time.Microsecond), pollBytes)
		e.stop()
	}
}
