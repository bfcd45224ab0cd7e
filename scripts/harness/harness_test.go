package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/internal/testenv"
)

// requireNetAdmin skips (or fails, see testenv.SkipOrFail) a test that
// makes namespaces when this is not root with ip, nsenter, iptables and
// busybox (for its servers and clients).
func requireNetAdmin(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "making network namespaces needs root")
	}
	for _, tool := range []string{"ip", "nsenter", "iptables", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipOrFail(t, "%s is not installed (Debian packages iproute2, util-linux, iptables, busybox-static)", tool)
		}
	}
}

var harnessSeq atomic.Int32

// testName is a harness name unique to this test and this process, so that
// parallel tests and other runs of this package never share one.
func testName(t *testing.T) string {
	t.Helper()
	short := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(strings.TrimPrefix(t.Name(), "Test"), "-"))
	name := fmt.Sprintf("t%d-%d-%s", os.Getpid(), harnessSeq.Add(1), short)
	return strings.TrimRight(name[:min(len(name), 32)], "-")
}

// up brings up a harness of n hosts for t, taken down when t ends.
// shortTempDir is a temporary directory with a short path, removed when
// the test ends: a host's Podman run root lies below the state directory,
// and Podman refuses one of more than 50 characters, which t.TempDir()
// paths (named after the test) exceed.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kh") //nolint:usetesting // t.TempDir paths are too long for Podman's run root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func up(t *testing.T, n int) *Cluster {
	t.Helper()
	stateDir := filepath.Join(shortTempDir(t), "cluster")
	c, err := Up(t.Context(), Options{Name: testName(t), Hosts: n, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Down(context.Background(), stateDir); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	return c
}

// serve runs busybox httpd inside h on h.Addr:port, serving a file whose
// content names h, until t ends; it returns the file's URL and content.
func serve(t *testing.T, h Host, port int) (url, content string) {
	t.Helper()
	root := t.TempDir()
	content = "served by " + h.Name + "\n"
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(h.Addr, uint16(port)).String()
	cmd := h.Command(context.Background(), "busybox", "httpd", "-f", "-p", addr, "-h", root)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start httpd in %s: %v", h.Name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return "http://" + addr + "/index.html", content
}

// fetch gets url with busybox wget inside h. (Busybox 1.35's wget -T
// segfaults, hence the context's timeout.)
func fetch(ctx context.Context, h Host, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := h.Command(ctx, "busybox", "wget", "-q", "-O", "-", url).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("wget %s in %s: %w: %s", url, h.Name, err, out)
	}
	return string(out), nil
}

func TestUpDownRestoresHost(t *testing.T) {
	requireNetAdmin(t)
	before := takeSnapshot(t)
	stateDir := filepath.Join(shortTempDir(t), "cluster")
	name := testName(t)
	c, err := Up(t.Context(), Options{Name: name, Hosts: 3, StateDir: stateDir})
	if err != nil {
		t.Fatal(err)
	}
	downed := false
	t.Cleanup(func() {
		if !downed {
			_ = Down(context.Background(), stateDir)
		}
	})

	t.Run("state file", func(t *testing.T) {
		loaded, err := Load(stateDir)
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Bridge != c.Bridge || loaded.Subnet != c.Subnet || len(loaded.Hosts) != 3 || loaded.Hosts[2] != c.Hosts[2] {
			t.Errorf("state file holds %+v, Up returned %+v", loaded, c)
		}
	})
	t.Run("directories", func(t *testing.T) {
		for _, h := range c.Hosts {
			for _, d := range []string{h.DataDir, h.PodmanRoot, h.RunRoot, h.NetworkConfigDir, h.TmpDir} {
				if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
					t.Errorf("%s: %s is not a directory: %v", h.Name, d, err)
				}
			}
		}
	})
	t.Run("subnet is the harness's alone", func(t *testing.T) { checkSubnetOwned(t, c, before) })
	t.Run("hosts reach host 1", func(t *testing.T) {
		url, content := serve(t, c.Hosts[0], 8080)
		for _, h := range c.Hosts[1:] {
			polltest.UntilErr(t, 10*time.Second, h.Name+" fetches "+url, func() error {
				got, err := fetch(t.Context(), h, url)
				if err == nil && got != content {
					err = fmt.Errorf("got %q, want %q", got, content)
				}
				return err
			})
		}
		checkRuleCounted(t, c)
	})
	t.Run("InNetns dials from inside a host", func(t *testing.T) {
		url, _ := serve(t, c.Hosts[0], 8081)
		target := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/index.html")
		var local netip.Addr
		polltest.UntilErr(t, 10*time.Second, "dial "+target+" inside "+c.Hosts[1].Name, func() error {
			return c.Hosts[1].InNetns(func() error {
				conn, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return err
				}
				defer conn.Close()
				local = conn.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				return nil
			})
		})
		// From the machine the connection would come from the bridge's
		// address; from inside host 2, from host 2's.
		if local != c.Hosts[1].Addr {
			t.Errorf("the connection made inside %s came from %v, want %v", c.Hosts[1].Name, local, c.Hosts[1].Addr)
		}
	})
	if err := Down(t.Context(), stateDir); err != nil {
		t.Fatalf("down: %v", err)
	}
	downed = true
	if d := before.diff(takeSnapshot(t), name); d != "" {
		t.Errorf("the machine's network differs after Down:\n%s", d)
	}
	for _, p := range []string{filepath.Join(stateDir, StateFile), c.Hosts[0].Dir, stateDir} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after Down: %v", p, err)
		}
	}
	if err := Down(t.Context(), stateDir); err != nil {
		t.Errorf("second down: %v", err)
	}
}

// checkSubnetOwned checks that on the machine the harness's subnet holds
// only the bridge's address and route, and that nothing did before Up.
func checkSubnetOwned(t *testing.T, c *Cluster, before hostSnapshot) {
	t.Helper()
	ctx := t.Context()
	for _, src := range []string{"ip -4 -o addr show", "ip -4 route show table all"} {
		for _, l := range before[src] {
			if p := firstPrefix(l); p.IsValid() && p.Overlaps(c.Subnet) {
				t.Errorf("before Up, %q already used %v", l, c.Subnet)
			}
		}
	}
	addrOut, err := output(ctx, "ip", "-4", "-o", "addr", "show")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines(addrOut) {
		p := firstPrefix(l)
		if p.IsValid() && p.Overlaps(c.Subnet) && (!strings.Contains(l, " "+c.Bridge+" ") || p.Addr() != c.Gateway) {
			t.Errorf("an address of the machine besides the bridge's lies in %v: %s", c.Subnet, l)
		}
	}
	routeOut, err := output(ctx, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines(routeOut) {
		if p := firstPrefix(l); p.IsValid() && p.Overlaps(c.Subnet) && !strings.Contains(l, "dev "+c.Bridge+" ") {
			t.Errorf("a route of the machine to %v does not go to the bridge %s: %s", c.Subnet, c.Bridge, l)
		}
	}
	for _, h := range c.Hosts {
		out, err := outputCmd(h.Command(ctx, "ip", "-4", "-o", "addr", "show"))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"127.0.0.0/8", h.Prefix.Masked().String()}
		got, err := parseAddrs(out)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(strs(got), " ") != strings.Join(want, " ") {
			t.Errorf("%s has addresses %v, want %v", h.Name, got, want)
		}
		if !strings.Contains(out, " "+h.Addr.String()+"/") {
			t.Errorf("%s does not have its address %v: %s", h.Name, h.Addr, out)
		}
	}
}

// firstPrefix returns the first IPv4 address with its prefix length (not
// masked) or the first IPv4 address (as a /32) in a line of ip's output.
func firstPrefix(line string) netip.Prefix {
	for f := range strings.FieldsSeq(line) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			return p
		}
		if a, err := netip.ParseAddr(f); err == nil && a.Is4() {
			return netip.PrefixFrom(a, 32)
		}
	}
	return netip.Prefix{}
}

// checkRuleCounted checks, where bridged frames pass iptables, that the
// harness's ACCEPT rule saw the hosts' traffic.
func checkRuleCounted(t *testing.T, c *Cluster) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	if err != nil || strings.TrimSpace(string(b)) != "1" {
		t.Logf("bridged frames do not pass iptables here (bridge-nf-call-iptables: %q, %v)", b, err)
		return
	}
	out, err := output(t.Context(), "iptables", "-w", "-t", "filter", "-L", "FORWARD", "-v", "-n", "-x")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines(out) {
		if strings.Contains(l, commentPrefix+c.Name+" ") {
			if n, err := strconv.Atoi(strings.Fields(l)[0]); err != nil || n == 0 {
				t.Errorf("the harness's ACCEPT rule counted no packets: %s", l)
			}
			return
		}
	}
	t.Errorf("no FORWARD rule with the comment %q:\n%s", commentPrefix+c.Name, out)
}

func TestDownAfterPartialUp(t *testing.T) {
	requireNetAdmin(t)
	for _, tc := range []struct {
		name  string
		step  string
		crash bool // the process dies: Up leaves everything to Down
	}{
		{"crash before the directories", "dirs", true},
		{"crash before the iptables rule", "iptables", true},
		{"crash before the bridge", "bridge", true},
		{"crash before host 2", "host node2", true},
		{"crash before host 3", "host node3", true},
		{"failure before the bridge", "bridge", false},
		{"failure before host 3", "host node3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := takeSnapshot(t)
			name := testName(t)
			stateDir := filepath.Join(shortTempDir(t), "cluster")
			opts := Options{Name: name, Hosts: 3, StateDir: stateDir}
			if tc.crash {
				opts.crashBefore = tc.step
			} else {
				opts.failBefore = tc.step
			}
			if _, err := Up(t.Context(), opts); err == nil || !strings.Contains(err.Error(), "simulated") {
				t.Fatalf("up: %v, want the simulated error", err)
			}
			_, statErr := os.Stat(filepath.Join(stateDir, StateFile))
			if tc.crash != (statErr == nil) {
				t.Errorf("after Up's crash=%v, the state file: %v", tc.crash, statErr)
			}
			// Down runs as task cluster:down would: from the state directory alone.
			for i := range 2 {
				if err := Down(t.Context(), stateDir); err != nil {
					t.Fatalf("down #%d: %v", i+1, err)
				}
			}
			if d := before.diff(takeSnapshot(t), name); d != "" {
				t.Errorf("the machine's network differs after Down:\n%s", d)
			}
			if _, err := os.Stat(stateDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the state directory Up created is still there: %v", err)
			}
		})
	}
}

func TestUpRefuses(t *testing.T) {
	requireNetAdmin(t)
	used, err := machinePrefixes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var taken netip.Prefix
	for _, p := range used {
		if p.Bits() <= 24 && !p.Addr().IsLoopback() {
			taken = netip.PrefixFrom(p.Addr(), 24).Masked()
			break
		}
	}
	before := takeSnapshot(t)
	name := testName(t)
	if taken.IsValid() {
		_, err := Up(t.Context(), Options{Name: name, Hosts: 2, Subnet: taken, StateDir: shortTempDir(t)})
		if err == nil || !strings.Contains(err.Error(), "overlaps") {
			t.Errorf("up on the machine's subnet %v: %v, want an overlap error", taken, err)
		}
	}
	c := up(t, 1)
	if _, err := Up(t.Context(), Options{Name: name, Hosts: 1, StateDir: c.StateDir}); !errors.Is(err, ErrAlreadyUp) {
		t.Errorf("up on a state directory in use: %v, want ErrAlreadyUp", err)
	}
	again := filepath.Join(shortTempDir(t), "again")
	if _, err := Up(t.Context(), Options{Name: c.Name, Hosts: 1, StateDir: again}); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("up of a second harness named %s: %v, want a name conflict", c.Name, err)
	}
	if err := c.Down(t.Context()); err != nil {
		t.Fatal(err)
	}
	if d := before.diff(takeSnapshot(t), c.Name); d != "" {
		t.Errorf("the machine's network differs after refused Ups and Down:\n%s", d)
	}
}

func TestParallelHarnessesStayApart(t *testing.T) {
	requireNetAdmin(t)
	t.Parallel()
	// Two harnesses come up at the same time, as two test binaries' would.
	var clusters [2]*Cluster
	var errs [2]error
	var wg sync.WaitGroup
	for i := range clusters {
		stateDir := filepath.Join(shortTempDir(t), "cluster")
		t.Cleanup(func() {
			if err := Down(context.Background(), stateDir); err != nil {
				t.Errorf("down: %v", err)
			}
		})
		name := testName(t)
		wg.Go(func() {
			clusters[i], errs[i] = Up(t.Context(), Options{Name: name, Hosts: 2, StateDir: stateDir})
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	a, b := clusters[0], clusters[1]
	if a.Bridge == b.Bridge || a.Subnet.Overlaps(b.Subnet) || a.Hosts[0].Netns == b.Hosts[0].Netns || a.Hosts[0].VethHost == b.Hosts[0].VethHost || a.Hosts[0].WGIface == b.Hosts[0].WGIface {
		t.Fatalf("the harnesses share names or addresses: %s %v %s and %s %v %s", a.Bridge, a.Subnet, a.Hosts[0].Netns, b.Bridge, b.Subnet, b.Hosts[0].Netns)
	}
	for _, c := range clusters {
		url, content := serve(t, c.Hosts[0], 8081)
		polltest.UntilErr(t, 10*time.Second, c.Hosts[1].Name+" of "+c.Name+" fetches "+url, func() error {
			got, err := fetch(t.Context(), c.Hosts[1], url)
			if err == nil && got != content {
				err = fmt.Errorf("got %q, want %q", got, content)
			}
			return err
		})
	}
	// No host has a route out of its subnet: b's servers are out of a's reach.
	if out, err := fetch(t.Context(), a.Hosts[1], "http://"+netip.AddrPortFrom(b.Hosts[0].Addr, 8081).String()+"/index.html"); err == nil {
		t.Errorf("a host of %s reached a host of %s: %q", a.Name, b.Name, out)
	}
}

func TestDownStopsProcessesInHosts(t *testing.T) {
	requireNetAdmin(t)
	t.Parallel()
	c := up(t, 1)
	// Down comes right after the Starts: some of the nsenters have not
	// entered the namespace yet (about one in ten on an idle machine), and
	// Down must stop those too rather than let them run on in a namespace
	// it deleted.
	const n = 10
	waited := make(chan error, n)
	var cmds []*exec.Cmd
	for range n {
		cmd := c.Hosts[0].Command(context.Background(), "busybox", "sleep", "600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		go func() { waited <- cmd.Wait() }()
	}
	t.Cleanup(func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Kill()
		}
	})
	if err := c.Down(t.Context()); err != nil {
		t.Fatalf("down: %v", err)
	}
	// Down waited for them, so they have ended; a small grace for Wait.
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case err := <-waited:
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
				t.Errorf("a process in %s ended with %v, want SIGTERM from Down", c.Hosts[0].Name, err)
			}
		case <-deadline:
			t.Fatalf("%d of %d processes started in %s still run after Down returned", n-i, n, c.Hosts[0].Name)
		}
	}
}
