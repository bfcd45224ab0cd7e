package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestBuildRunStepsAreNotHostRoot builds a Dockerfile whose RUN step writes
// files and then sleeps. While it sleeps, the test looks from the host: the
// step's process and the file it wrote belong to the workload's host uid
// (its slot of the containers sub-id range, not 0), and its uid map says
// so. Then the image: uid 0 inside, the files container root's (and a later
// RUN step's), also in a container with the workload's explicit map, where
// root may write them.
func TestBuildRunStepsAreNotHostRoot(t *testing.T) {
	needPodman(t)
	slot := int(subIDs.Slots() / 2)
	m, ok := subIDs.Map(slot)
	if !ok {
		t.Fatalf("slot %d outside %+v", slot, *subIDs)
	}
	base := m.HostBase
	seconds := strconv.Itoa(5000 + int(time.Now().UnixNano()%1000)) // marks our sleep among the host's processes
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("userns", map[string]string{
		"Dockerfile": "FROM " + baseImage + "\n" +
			"COPY index.html /www/index.html\n" +
			"RUN id -u > /uid && cat /proc/self/uid_map > /uid_map && touch /marker && mkdir /app && echo hi > /app/f && " +
			"chmod 4755 /app/f && chown 1000:1000 /app && (sleep " + seconds + " || true)\n" +
			"RUN test -O /marker && test -O /www/index.html && echo ok > /second && rm /uid_map\n",
		"index.html": "<h1>hello</h1>\n",
	})
	ns, wl := "default", randomName("bt-userns")
	b, _ := testBuilder(t, Config{}, ns, wl)
	t.Cleanup(func() {
		for _, p := range processesRunning("sleep " + seconds) {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	})
	type result struct {
		rec api.Build
		err error
	}
	done := make(chan result, 1)
	go func() {
		rec, err := b.Build(context.Background(), Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit, UserNSSlot: &slot})
		done <- result{rec, err}
	}()

	var pid int
	polltest.Until(t, 2*time.Minute, "the RUN step sleeping", func() bool {
		select {
		case r := <-done:
			t.Fatalf("the build ended before its RUN step was seen: %+v, %v", r.rec, r.err)
		default:
		}
		if pids := processesRunning("sleep " + seconds); len(pids) > 0 {
			pid = pids[0]
			return true
		}
		return false
	})
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	if uid, err := statusUID(proc); err != nil || uid != base {
		t.Errorf("the RUN step's process runs as host uid %d (%v), want %d, the workload's slot %d", uid, err, base, slot)
	}
	if b, err := os.ReadFile(filepath.Join(proc, "uid_map")); err != nil || strings.Join(strings.Fields(string(b)), " ") != fmt.Sprintf("0 %d 65536", base) {
		t.Errorf("the RUN step's uid map %q (%v), want 0 %d 65536", b, err, base)
	}
	for file, want := range map[string]int64{"marker": base, "app": base + 1000, "www/index.html": base} {
		fi, err := os.Lstat(filepath.Join(proc, "root", file))
		if err != nil {
			t.Errorf("stat /%s of the RUN step from the host: %v", file, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if int64(st.Uid) != want || int64(st.Gid) != want {
			t.Errorf("/%s of the RUN step is owned by host %d:%d, want %d", file, st.Uid, st.Gid, want)
		}
		if st.Uid == 0 || int64(st.Uid) < subIDs.Start || int64(st.Uid) >= subIDs.Start+subIDs.Count {
			t.Errorf("/%s of the RUN step is owned by host uid %d, outside the containers range %d:%d", file, st.Uid, subIDs.Start, subIDs.Count)
		}
	}
	for _, p := range processesRunning("sleep " + seconds) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	log := readLog(t, b, ns, wl, commit[:12])
	if want := fmt.Sprintf("host ids %d-%d (the workload's slot %d", base, base+65535, slot); !strings.Contains(log, want) {
		t.Errorf("build log lacks %q:\n%s", want, log)
	}

	const check = `cat /uid; id -u; stat -c '%u:%g %a %n' /marker /app /app/f /www/index.html /second; test -e /uid_map || echo whited out`
	want := "0\n0\n0:0 644 /marker\n1000:1000 755 /app\n0:0 4755 /app/f\n0:0 644 /www/index.html\n0:0 644 /second\nwhited out\n"
	if out := podmanOutput(t, storeArgs(), "run", "--rm", "--network", "none", "--name", randomName("bt-run"), r.rec.Image, "sh", "-c", check); out != want {
		t.Errorf("image content\n got %q\nwant %q", out, want)
	}
	idmap := fmt.Sprintf("0:%d:65536", base)
	out := podmanOutput(t, storeArgs(), "run", "--rm", "--network", "none", "--uidmap", idmap, "--gidmap", idmap, "--name", randomName("bt-run"),
		r.rec.Image, "sh", "-c", check+" && echo more >> /app/f && touch /marker && echo written")
	if out != want+"written\n" {
		t.Errorf("image content under the workload's map\n got %q\nwant %q", out, want+"written\n")
	}
}

// statusUID returns the real uid in a /proc/PID/status.
func statusUID(proc string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(proc, "status"))
	if err != nil {
		return -1, err
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return -1, errors.New("no Uid line")
}

// TestBuildWithoutSubIDsFails: a node without the containers sub-id range
// builds nothing (RUN steps would run as host root), and says what to fix.
func TestBuildWithoutSubIDsFails(t *testing.T) {
	needPodman(t)
	repo := newAppRepo(t, appRepoOptions{allowSHA: true})
	commit := repo.Commit("app", sampleApp)
	ns, wl := "default", randomName("bt-nosubid")
	b, _ := testBuilder(t, Config{}, ns, wl)
	b.cfg.SubIDs = nil
	_, err := b.Build(context.Background(), Request{Namespace: ns, Workload: wl, Repository: repo.url, Commit: commit})
	var fe *FailedError
	if !errors.As(err, &fe) || !errors.Is(err, ErrNoSubIDs) || fe.Stage != StageBuild || !fe.Stalled() {
		t.Fatalf("err %v: want a stalled build failure wrapping ErrNoSubIDs", err)
	}
	if !strings.Contains(fe.LogTail, "/etc/subuid") {
		t.Errorf("log tail does not name /etc/subuid:\n%s", fe.LogTail)
	}
	if n := b.builds.Load(); n != 0 {
		t.Errorf("%d podman builds ran", n)
	}
}
