package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// touchedSysctls are the sysctls that decide whether bridged traffic passes
// iptables and whether the machine forwards: the harness must leave them as
// they are.
var touchedSysctls = []string{
	"net.bridge.bridge-nf-call-iptables",
	"net.bridge.bridge-nf-call-ip6tables",
	"net.ipv4.ip_forward",
}

// hostSnapshot is the machine's network state a harness could change, one
// sorted list of lines per source.
type hostSnapshot map[string][]string

func takeSnapshot(t *testing.T) hostSnapshot {
	t.Helper()
	ctx := context.Background()
	s := hostSnapshot{}
	for _, src := range [][]string{
		{"ip", "-4", "-o", "addr", "show"},
		{"ip", "-4", "route", "show", "table", "all"},
		{"iptables", "-w", "-t", "filter", "-S"},
	} {
		out, err := exec.CommandContext(ctx, src[0], src[1:]...).Output()
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(src, " "), err)
		}
		s[strings.Join(src, " ")] = lines(string(out))
	}
	out, err := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip -o link show: %v", err)
	}
	var links []string
	for _, l := range lines(string(out)) {
		// "7: veth1@if2: <...> mtu 1500 qdisc noqueue master podman0 state UP ..."
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		link := strings.TrimSuffix(f[1], ":")
		if i := slices.Index(f, "master"); i >= 0 && i+1 < len(f) {
			link += " master " + f[i+1]
		}
		links = append(links, link)
	}
	slices.Sort(links)
	s["ip link names"] = links
	var sysctls []string
	for _, name := range touchedSysctls {
		b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		v := strings.TrimSpace(string(b))
		if err != nil {
			v = "absent"
		}
		sysctls = append(sysctls, name+" = "+v)
	}
	s["sysctl"] = sysctls
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range entries {
		s[netnsDir] = append(s[netnsDir], e.Name())
	}
	return s
}

func lines(out string) []string {
	var ls []string
	for l := range strings.Lines(out) {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			ls = append(ls, l)
		}
	}
	slices.Sort(ls)
	return ls
}

// othersChurn reports whether a line is another program's change, which
// other tests on this machine make while this one runs: Podman's and
// netavark's links, addresses, routes, rules and namespaces, other
// harnesses' (their bridge and veths are kh-<other id>, their rules carry
// their own name), and the overlay interface of a kat-agent started on the
// machine's own network (kat0 by default; a harness names none kat*). A
// line of the harness named ours never is.
func othersChurn(line, ours string) bool {
	id := linkID(ours)
	switch {
	case strings.Contains(line, "kh-"+id) || strings.Contains(line, commentPrefix+ours) || strings.HasPrefix(line, ours+"-node"):
		return false
	case strings.Contains(line, "kh-") || strings.Contains(line, commentPrefix):
		return true
	}
	for _, f := range strings.Fields(line) {
		if strings.HasPrefix(strings.Trim(f, `":`), "kat") {
			return true
		}
	}
	l := strings.ToLower(line)
	return strings.Contains(l, "podman") || strings.Contains(l, "netavark") || strings.HasPrefix(l, "netns-") || strings.HasPrefix(l, "cni-")
}

// diff describes how after differs from before, ignoring other programs'
// churn; "" when the machine is as it was.
func (before hostSnapshot) diff(after hostSnapshot, ours string) string {
	var b strings.Builder
	keys := make([]string, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	for k := range after {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		keep := func(ls []string) []string {
			return slices.DeleteFunc(slices.Clone(ls), func(l string) bool {
				// Namespaces are files anyone may add: only the harness's own count.
				return othersChurn(l, ours) || (k == netnsDir && !strings.HasPrefix(l, ours+"-"))
			})
		}
		was, is := keep(before[k]), keep(after[k])
		for _, l := range was {
			if !slices.Contains(is, l) {
				fmt.Fprintf(&b, "%s: gone: %s\n", k, l)
			}
		}
		for _, l := range is {
			if !slices.Contains(was, l) {
				fmt.Fprintf(&b, "%s: new: %s\n", k, l)
			}
		}
	}
	return b.String()
}

func TestOthersChurn(t *testing.T) {
	ours := "t1-x"
	id := linkID(ours)
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"veth7@if2 master podman0", true},
		{"-A NETAVARK_FORWARD -s 10.88.0.0/16 -j ACCEPT", true},
		{"netns-a7e2f842-70c8-d5db-3073-5c3320c183ee", true},
		{"kh-00000000 master x", true},
		{"kat0", true},
		{"5: kat0 inet 10.100.0.1/32 scope global kat0", true},
		{"10.100.0.0/16 dev kat0 scope link", true},
		{"kh-" + id, false},
		{"kh-" + id + "-1 master kh-" + id, false},
		{`-A FORWARD -i kh-` + id + ` -o kh-` + id + ` -m comment --comment "kat-harness t1-x" -j ACCEPT`, false},
		{ours + "-node1", false},
		{"172.30.1.0/24 dev eth1 proto kernel scope link src 172.30.1.1", false},
		{"eth0", false},
	} {
		if got := othersChurn(tc.line, ours); got != tc.want {
			t.Errorf("othersChurn(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}
