package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// The whole-system benchmarks time KAT from outside, as a user sees it: from
// the moment the command or webhook is sent until the API says it is done
// (what `katcall status` shows) or the new version answers, against a floor
// done by hand, side by side in each iteration. Each iteration's figures are
// printed, then their minimum, median and maximum.

// Every benchmark looks at a status from inside its test process with the
// API client, at a fixed interval: a katcall process per look would cost
// the machine a process start that the floor done by hand does not pay. The
// interval is fine enough that the look's delay (half of it on average) is
// a small part of the figure, coarse enough that answering takes the leader
// little CPU: a workload's status with 50 instances costs the leader a few
// milliseconds of CPU (BenchmarkAgentStart50 prints how many).
const (
	// statusPollEvery is the interval for a workload of one instance.
	statusPollEvery = 20 * time.Millisecond
	// statusPollEvery50 is the interval for a workload of 50.
	statusPollEvery50 = 100 * time.Millisecond
)

// untilStatus looks at ref's status every every (for timeout at most)
// until cond holds, and returns when the answer that showed it arrived and
// that answer.
func untilStatus(tb testing.TB, client *apiclient.Client, ref string, every, timeout time.Duration, cond func(*api.WorkloadDetail) bool) (time.Time, *api.WorkloadDetail) {
	tb.Helper()
	ns, name, _ := strings.Cut(ref, "/")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var lastErr error
	for {
		d, err := client.WorkloadStatus(ctx, ns, name)
		if err == nil && cond(d) {
			return time.Now(), d
		}
		lastErr = err
		select {
		case <-ctx.Done():
			tb.Fatalf("%s: not done within %s (last error: %v)", ref, timeout, lastErr)
			return time.Time{}, nil
		case <-tick.C:
		}
	}
}

// pollStatus looks at ref's status every every, as untilStatus does, until
// the returned stop is called: it puts the same looks on a floor's side,
// which needs none to know when it is done.
func pollStatus(client *apiclient.Client, ref string, every time.Duration) (stop func()) {
	ns, name, _ := strings.Cut(ref, "/")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			_, _ = client.WorkloadStatus(ctx, ns, name)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// waitQuiet waits (up to quietTimeout) until the machine's CPUs have been
// busy less than quietBusy of the time over two windows of quietWindow in a
// row, so that an arm does not start while the one before still winds down
// (conmon's cleanup of a removed container, a push to the cache, an image
// removal) and pay for it. Both sides of a benchmark wait the same way.
func waitQuiet(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(quietTimeout)
	quiet := 0
	last, err := cpuTimes()
	if err != nil {
		tb.Fatal(err)
	}
	for quiet < 2 {
		time.Sleep(quietWindow) //nolint:forbidigo // the window is what is measured
		now, err := cpuTimes()
		if err != nil {
			tb.Fatal(err)
		}
		busy, total := now.busy-last.busy, now.total-last.total
		last = now
		if total > 0 && float64(busy) < quietBusy*float64(total) {
			quiet++
			continue
		}
		quiet = 0
		if time.Now().After(deadline) {
			tb.Logf("the machine was not quiet within %s (%.0f %% busy): timing anyway", quietTimeout, 100*float64(busy)/float64(max(total, 1)))
			return
		}
	}
}

const (
	quietWindow  = 100 * time.Millisecond
	quietBusy    = 0.15
	quietTimeout = 15 * time.Second
)

type cpuTime struct{ busy, total uint64 }

// cpuTimes reads the machine's CPU time (in clock ticks) from /proc/stat:
// all of it, and what was not idle or waiting on I/O.
func cpuTimes() (cpuTime, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTime{}, fmt.Errorf("read the machine's CPU times: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return cpuTime{}, fmt.Errorf("read the machine's CPU times: /proc/stat begins %q", line)
	}
	var t cpuTime
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTime{}, fmt.Errorf("read the machine's CPU times: field %d of %q: %w", i+1, line, err)
		}
		if i >= 8 { // guest time is counted in user time already
			break
		}
		t.total += n
		if i != 3 && i != 4 { // idle, iowait
			t.busy += n
		}
	}
	return t, nil
}

// sideBySide collects KAT's figure and its floor's per iteration.
type sideBySide struct {
	// what names the figure; kat and floor name the two sides.
	what, kat, floor string
	kats, floors     []time.Duration
}

// add records one iteration and prints it.
func (s *sideBySide) add(kat, floor time.Duration) {
	s.kats = append(s.kats, kat)
	s.floors = append(s.floors, floor)
	fmt.Fprintf(os.Stderr, "%s, run %d: %s %d ms, %s %d ms, ratio %.2f\n", s.what, len(s.kats),
		s.kat, kat.Milliseconds(), s.floor, floor.Milliseconds(), kat.Seconds()/floor.Seconds())
}

// report prints every iteration's figures again with their minimum, median
// and maximum, and reports the medians (unit prefix: the metric's name).
func (s *sideBySide) report(b *testing.B, unit string) {
	b.Helper()
	if len(s.kats) == 0 {
		return
	}
	ratios := make([]float64, len(s.kats))
	var runs []string
	for i := range s.kats {
		ratios[i] = s.kats[i].Seconds() / s.floors[i].Seconds()
		runs = append(runs, fmt.Sprintf("%d/%d ms (%.2f)", s.kats[i].Milliseconds(), s.floors[i].Milliseconds(), ratios[i]))
	}
	km, fm, rm := minMedMax(durSeconds(s.kats)), minMedMax(durSeconds(s.floors)), minMedMax(ratios)
	fmt.Fprintf(os.Stderr, "%s over %d runs, %s/%s each: %s\n", s.what, len(s.kats), s.kat, s.floor, strings.Join(runs, ", "))
	fmt.Fprintf(os.Stderr, "%s: %s min %.0f median %.0f max %.0f ms; %s min %.0f median %.0f max %.0f ms; ratio min %.2f median %.2f max %.2f\n",
		s.what, s.kat, km[0]*1000, km[1]*1000, km[2]*1000, s.floor, fm[0]*1000, fm[1]*1000, fm[2]*1000, rm[0], rm[1], rm[2])
	b.ReportMetric(km[1]*1000, unit+"-kat-median-ms")
	b.ReportMetric(fm[1]*1000, unit+"-floor-median-ms")
	b.ReportMetric(rm[1], unit+"-ratio-median")
	b.ReportMetric(rm[2], unit+"-ratio-max")
}

func durSeconds(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

// minMedMax returns the minimum, the median (the mean of the middle two of
// an even count) and the maximum of xs.
func minMedMax(xs []float64) [3]float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return [3]float64{s[0], med, s[n-1]}
}
