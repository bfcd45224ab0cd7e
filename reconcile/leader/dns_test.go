package leader

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

const testDomain = "kat.test"

// lbFiles is a Service of replicas with a VirtualLoadBalancer: a named TCP
// port, an unnamed one and a named UDP one, and a health check.
func lbFiles(t *testing.T, name string, replicas int) map[string][]byte {
	t.Helper()
	files := workloadFiles(t, name, quadlet.TypeService, replicas, "v1")
	files["VirtualLoadBalancer.kat"] = []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - {name: http, containerPort: 8080}
    - {containerPort: 9090}
    - {name: dns, containerPort: 53, protocol: UDP}
  healthCheck:
    exec: {command: ["true"]}
`)
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return files
}

// withIPs gives every assignment of workload an overlay address unless
// placement gave it one, and returns the assignments as stored.
func (e *leaderEnv) withIPs(workload string, base byte) []api.Assignment {
	e.t.Helper()
	as := e.assignments(workload)
	for i := range as {
		if as[i].IP.IsValid() {
			continue
		}
		as[i].IP = netip.AddrFrom4([4]byte{10, 99, base, byte(i + 2)})
		if _, err := e.repo.WriteAssignments(e.ctx, as[i:i+1], nil); err != nil {
			e.t.Fatal(err)
		}
	}
	return as
}

// reportHealth writes node's status with the instances as, each running
// and healthy unless named in unhealthy.
func (e *leaderEnv) reportHealth(node string, as []api.Assignment, unhealthy ...string) {
	e.t.Helper()
	st := api.NodeStatus{NodeName: node, Timestamp: time.Now().Unix()}
	st.Resources.Allocatable = api.ResourceList{CPU: "4", Memory: "8Gi"}
	for _, a := range as {
		if a.Node != node {
			continue
		}
		is := running(a)
		is.HealthStatus = api.HealthHealthy
		if slices.Contains(unhealthy, a.InstanceID) {
			is.HealthStatus = api.HealthUnhealthy
		}
		st.WorkloadInstances = append(st.WorkloadInstances, is)
	}
	if err := e.repo.PutNodeStatus(e.ctx, st); err != nil {
		e.t.Fatal(err)
	}
}

// dnsState renders the DNS records under testDomain, one
// "workload/instance ip ports" line each, sorted.
func (e *leaderEnv) dnsState() string {
	e.t.Helper()
	recs, err := e.repo.ListDNSRecords(e.ctx, testDomain)
	if err != nil {
		e.t.Fatal(err)
	}
	var lines []string
	for _, d := range recs {
		var ports []string
		for _, p := range d.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d/%s", p.Name, p.Port, p.Protocol))
		}
		lines = append(lines, fmt.Sprintf("%s/%s %s %s", d.Workload, d.InstanceID, d.IP, strings.Join(ports, ",")))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func dnsLine(a api.Assignment) string {
	ports := "http:8080/tcp,dns:53/udp"
	if a.Workload != "web" {
		ports = ""
	}
	return fmt.Sprintf("%s/%s %s %s", a.Workload, a.InstanceID, a.IP, ports)
}

func dnsLines(as ...api.Assignment) string {
	var lines []string
	for _, a := range as {
		lines = append(lines, dnsLine(a))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestLeaderDNSRecords: the records loop writes the record of every ready
// instance with an address (named ports only) and removes it when the
// instance turns unhealthy, is marked draining, its node is lost or its
// workload is deleted; a record nobody's instance backs is removed on
// start.
func TestLeaderDNSRecords(t *testing.T) {
	t.Parallel()
	e, b := newTwoNodeEnv(t)
	stray := api.DNSRecord{Namespace: "ns1", Workload: "gone", InstanceID: "gone-1", IP: netip.MustParseAddr("10.99.9.9")}
	if _, err := e.repo.WriteDNSRecords(e.ctx, testDomain, []api.DNSRecord{stray}, nil); err != nil {
		t.Fatal(err)
	}
	e.apply(lbFiles(t, "web", 2), api.APIOwner())
	e.apply(workloadFiles(t, "api", quadlet.TypeService, 1, "v1"), api.APIOwner())
	_, stop := e.run(Config{ClusterDomain: testDomain, NodeLossTimeout: 2 * time.Second})
	defer stop()
	polltest.Until(t, 10*time.Second, "web spread over n1 and n2, api placed", func() bool {
		return e.onNodes("web") == "n1:1 n2:1" && len(e.assignments("api")) == 1
	})
	polltest.Until(t, 10*time.Second, "the stray record removed", func() bool { return e.dnsState() == "" })
	if got := e.dnsState(); got != "" {
		t.Fatalf("records before any instance is ready:\n%s", got)
	}
	web := e.withIPs("web", 1)
	apiIns := e.withIPs("api", 2)
	all := append(slices.Clone(web), apiIns...)
	report := func(unhealthy ...string) {
		for _, n := range []string{"n1", "n2"} {
			e.reportHealth(n, all, unhealthy...)
		}
	}
	waitDNS := func(what string, want string) {
		t.Helper()
		polltest.Until(t, 10*time.Second, what, func() bool { return e.dnsState() == want })
	}

	report()
	waitDNS("every ready instance in DNS", dnsLines(all...))

	report(web[0].InstanceID)
	waitDNS("the unhealthy instance out of DNS", dnsLines(web[1], apiIns[0]))
	report()
	waitDNS("healthy again, back in DNS", dnsLines(all...))

	leaving := apiIns[0]
	leaving.LeavingAt = time.Now()
	if _, err := e.repo.WriteAssignments(e.ctx, []api.Assignment{leaving}, nil); err != nil {
		t.Fatal(err)
	}
	waitDNS("the leaving instance out of DNS", dnsLines(web...))

	lost := web[1].Node
	b.set(lost, false)
	waitDNS("the instance of the lost node out of DNS", dnsLines(web[0]))

	if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "web", Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	waitDNS("the deleted workload out of DNS", "")
}

func TestDiffDNSRecords(t *testing.T) {
	rec := func(id, ip string) api.DNSRecord {
		return api.DNSRecord{Namespace: "ns", Workload: "w", InstanceID: id, IP: netip.MustParseAddr(ip)}
	}
	have := map[string]api.DNSRecord{
		resources.DNSKey("d", "ns", "w", "a"): rec("a", "10.0.0.1"),
		resources.DNSKey("d", "ns", "w", "b"): rec("b", "10.0.0.2"),
		resources.DNSKey("d", "ns", "w", "c"): rec("c", "10.0.0.3"),
	}
	put, del := DiffDNSRecords("d", []api.DNSRecord{rec("a", "10.0.0.1"), rec("b", "10.0.0.9"), rec("e", "10.0.0.5")}, have)
	var got []string
	for _, p := range put {
		got = append(got, "put "+p.InstanceID+" "+p.IP.String())
	}
	for _, k := range del {
		got = append(got, "del "+k)
	}
	want := []string{"put b 10.0.0.9", "put e 10.0.0.5", "del /kat/dns/d/ns/w/c"}
	if !slices.Equal(got, want) {
		t.Errorf("diff = %q, want %q", got, want)
	}
}

func TestDNSReady(t *testing.T) {
	ip := netip.MustParseAddr("10.0.0.1")
	running := api.InstanceStatus{Phase: api.InstanceRunning, HealthStatus: api.HealthHealthy}
	noCheck := api.InstanceStatus{Phase: api.InstanceRunning, HealthStatus: api.HealthNotApplicable}
	sick := api.InstanceStatus{Phase: api.InstanceRunning, HealthStatus: api.HealthUnhealthy}
	pending := api.InstanceStatus{Phase: api.InstanceRunning, HealthStatus: api.HealthPending}
	exited := api.InstanceStatus{Phase: api.InstanceFailed, HealthStatus: api.HealthHealthy}
	for _, tc := range []struct {
		name      string
		a         api.Assignment
		report    *api.InstanceStatus
		nodeReady bool
		want      bool
	}{
		{"running and healthy", api.Assignment{IP: ip}, &running, true, true},
		{"running without a check", api.Assignment{IP: ip}, &noCheck, true, true},
		{"unhealthy", api.Assignment{IP: ip}, &sick, true, false},
		{"health pending", api.Assignment{IP: ip}, &pending, true, false},
		{"stopped", api.Assignment{IP: ip}, &exited, true, false},
		{"not reported", api.Assignment{IP: ip}, nil, true, false},
		{"node NotReady", api.Assignment{IP: ip}, &running, false, false},
		{"no address", api.Assignment{}, &running, true, false},
		{"leaving", api.Assignment{IP: ip, LeavingAt: time.Unix(1, 0)}, &running, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DNSReady(tc.a, tc.report, tc.nodeReady); got != tc.want {
				t.Errorf("DNSReady = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestInstanceIDIsALabel: whatever the length of a valid workload name, its
// instance IDs are DNS labels (so each instance gets its record), names up
// to 48 characters keep their form, and two long names with a common
// beginning get different IDs.
func TestInstanceIDIsALabel(t *testing.T) {
	t.Parallel()
	hash := strings.Repeat("ab", 32)
	for n := 1; n <= 63; n++ {
		name := strings.Repeat("w", n)
		if n > 2 {
			name = "w" + strings.Repeat("-", n-2) + "w" // hyphens where the cut may fall
		}
		id := InstanceID(name, hash, "0a1b2")
		if !quadlet.IsDNSLabel(id) {
			t.Errorf("workload of %d characters: instance ID %q is not a DNS label", n, id)
		}
		if n <= 48 && id != name+"-abababab-0a1b2" {
			t.Errorf("workload of %d characters: instance ID %q, want the name kept whole", n, id)
		}
	}
	a := InstanceID(strings.Repeat("x", 60)+"-aa", hash, "0a1b2")
	b := InstanceID(strings.Repeat("x", 60)+"-bb", hash, "0a1b2")
	if a == b {
		t.Errorf("two long workload names share instance ID %q", a)
	}
}

// TestLongWorkloadNameGetsInstanceRecord: an instance of a workload whose
// name is the longest allowed (63 characters) gets its per-instance record.
func TestLongWorkloadNameGetsInstanceRecord(t *testing.T) {
	t.Parallel()
	e := newLeaderEnv(t)
	name := "long-" + strings.Repeat("n", 58)
	e.apply(workloadFiles(t, name, quadlet.TypeService, 1, "v1"), api.APIOwner())
	_, stop := e.run(Config{ClusterDomain: testDomain, NodeLossTimeout: time.Hour})
	defer stop()
	polltest.Until(t, 10*time.Second, "the instance placed", func() bool { return len(e.assignments(name)) == 1 })
	a := e.withIPs(name, 1)[0]
	e.report(1, running(a))
	want := fmt.Sprintf("%s/%s %s ", name, a.InstanceID, a.IP)
	polltest.Until(t, 10*time.Second, "the instance's record", func() bool { return e.dnsState() == want })
	if !quadlet.IsDNSLabel(a.InstanceID) {
		t.Errorf("instance ID %q is not a DNS label", a.InstanceID)
	}
}
