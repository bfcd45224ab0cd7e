package leader

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// ingressFiles is lbFiles with spec.ingress rules "host path" on the
// port named http.
func ingressFiles(t *testing.T, name string, replicas int, rules ...string) map[string][]byte {
	t.Helper()
	files := lbFiles(t, name, replicas)
	lb := string(files["VirtualLoadBalancer.kat"]) + "  ingress:\n"
	for _, r := range rules {
		host, path, _ := strings.Cut(r, " ")
		lb += fmt.Sprintf("    - {host: %s, path: %q, servicePortName: http}\n", host, path)
	}
	files["VirtualLoadBalancer.kat"] = []byte(lb)
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return files
}

// ingressState renders the routes records, one line per rule
// "ns/workload host+path -> backends" and per conflict
// "ns/workload host+path conflict holder".
func (e *leaderEnv) ingressState() string {
	e.t.Helper()
	recs, err := e.repo.ListIngressRoutes(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var lines []string
	for _, r := range recs {
		for _, rule := range r.Rules {
			var bs []string
			for _, b := range rule.Backends {
				bs = append(bs, b.Addr.String())
			}
			slices.Sort(bs)
			lines = append(lines, fmt.Sprintf("%s/%s %s%s -> %s", r.Namespace, r.Workload, rule.Host, rule.Path, strings.Join(bs, ",")))
		}
		for _, c := range r.Conflicts {
			lines = append(lines, fmt.Sprintf("%s/%s %s%s conflict %s", r.Namespace, r.Workload, c.Host, c.Path, c.HeldBy))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestLeaderIngressRoutes: the ingress loop routes each rule to the ready
// instances on the port named in their spec, unroutes an instance once it
// is unhealthy or leaving (before its assignment goes), keeps a host and
// path with the workload that held it first while another claims it,
// hands it over when the holder lets go, and removes a deleted workload's
// routes.
func TestLeaderIngressRoutes(t *testing.T) {
	t.Parallel()
	e, _ := newTwoNodeEnv(t)
	e.apply(ingressFiles(t, "web", 2, "a.test /", "a.test /api"), api.APIOwner())
	_, stop := e.run(Config{ClusterDomain: testDomain, NodeLossTimeout: 2 * time.Second, DrainDelay: time.Minute})
	defer stop()
	polltest.Until(t, 10*time.Second, "web spread over n1 and n2", func() bool { return e.onNodes("web") == "n1:1 n2:1" })
	waitIngress := func(what, want string) {
		t.Helper()
		polltest.Until(t, 10*time.Second, what+":\n"+want, func() bool { return e.ingressState() == want })
	}
	waitIngress("rules without backends before any instance is ready", "ns1/web a.test/ -> \nns1/web a.test/api -> ")
	web := e.withIPs("web", 1)
	report := func(unhealthy ...string) {
		for _, n := range []string{"n1", "n2"} {
			e.reportHealth(n, web, unhealthy...)
		}
	}
	report()
	addrs := func(as ...api.Assignment) string {
		var out []string
		for _, a := range as {
			out = append(out, a.IP.String()+":8080")
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	sortByID := func(as []api.Assignment) []api.Assignment {
		as = slices.Clone(as)
		slices.SortFunc(as, func(a, b api.Assignment) int { return strings.Compare(a.InstanceID, b.InstanceID) })
		return as
	}
	web = sortByID(web)
	both := fmt.Sprintf("ns1/web a.test/ -> %s\nns1/web a.test/api -> %s", addrs(web...), addrs(web...))
	waitIngress("both instances routed on their http port", both)

	report(web[0].InstanceID)
	waitIngress("the unhealthy instance unrouted", fmt.Sprintf("ns1/web a.test/ -> %s\nns1/web a.test/api -> %s", addrs(web[1]), addrs(web[1])))
	report()
	waitIngress("healthy again, routed", both)

	// A second workload claims a.test/ (held by web) and b.test/.
	e.apply(ingressFiles(t, "shop", 0, "a.test /", "b.test /"), api.APIOwner())
	waitIngress("a.test/ stays with web, shop gets b.test/", "ns1/shop a.test/ conflict ns1/web\nns1/shop b.test/ -> \n"+both)
	polltest.UntilErr(t, 10*time.Second, "shop's status has IngressConflict naming both", func() error {
		st, err := e.repo.GetWorkload(e.ctx, "ns1", "shop")
		if err != nil {
			return err
		}
		for _, c := range st.Status.Conditions {
			if c.Type == ConditionIngressConflict && c.Status == api.ConditionTrue &&
				strings.Contains(c.Message, "a.test/ of ns1/shop is served by ns1/web") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", st.Status.Conditions)
	})

	// web lets a.test/ go: shop takes it.
	e.apply(ingressFiles(t, "web", 2, "a.test /api"), api.APIOwner())
	waitIngress("shop holds a.test/ once web lets it go",
		fmt.Sprintf("ns1/shop a.test/ -> \nns1/shop b.test/ -> \nns1/web a.test/api -> %s", addrs(web...)))

	leaving := web[1]
	leaving.LeavingAt = time.Now()
	if _, err := e.repo.WriteAssignments(e.ctx, []api.Assignment{leaving}, nil); err != nil {
		t.Fatal(err)
	}
	waitIngress("the leaving instance unrouted while its assignment stays",
		fmt.Sprintf("ns1/shop a.test/ -> \nns1/shop b.test/ -> \nns1/web a.test/api -> %s", addrs(web[0])))
	if !slices.ContainsFunc(e.assignments("web"), func(a api.Assignment) bool { return a.InstanceID == leaving.InstanceID }) {
		t.Fatalf("the leaving instance's assignment went before its route: its container may stop while routed")
	}

	if _, err := e.repo.DeleteWorkload(e.ctx, resources.DeleteRequest{Namespace: "ns1", Name: "web", Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	waitIngress("the deleted workload's routes removed", "ns1/shop a.test/ -> \nns1/shop b.test/ -> ")
}

func TestResolveIngress(t *testing.T) {
	t0, t1 := time.Unix(1000, 0).UTC(), time.Unix(2000, 0).UTC()
	rule := func(host, path string) api.IngressRule {
		return api.IngressRule{Host: host, Path: path, Field: "spec.ingress[0]"}
	}
	claim := func(ns, wl string, rules ...api.IngressRule) IngressClaim {
		return IngressClaim{Namespace: ns, Workload: wl, Rules: rules}
	}
	held := func(ns, wl string, since time.Time, rules ...api.IngressRule) api.IngressRoutes {
		for i := range rules {
			rules[i].Since = since
		}
		return api.IngressRoutes{Namespace: ns, Workload: wl, Rules: rules}
	}
	render := func(rs []api.IngressRoutes) string {
		var lines []string
		for _, r := range rs {
			for _, x := range r.Rules {
				lines = append(lines, fmt.Sprintf("%s/%s holds %s%s since %d", r.Namespace, r.Workload, x.Host, x.Path, x.Since.Unix()))
			}
			for _, c := range r.Conflicts {
				lines = append(lines, fmt.Sprintf("%s/%s waits %s%s for %s", r.Namespace, r.Workload, c.Host, c.Path, c.HeldBy))
			}
		}
		return strings.Join(lines, "\n")
	}
	for _, tc := range []struct {
		name   string
		claims []IngressClaim
		held   []api.IngressRoutes
		want   string
	}{
		{
			name:   "a free route goes to the first claimant by name",
			claims: []IngressClaim{claim("b", "web", rule("a.test", "/")), claim("a", "web", rule("a.test", "/"))},
			want:   "a/web holds a.test/ since 2000\nb/web waits a.test/ for a/web",
		},
		{
			name:   "the holder keeps it whatever the names",
			claims: []IngressClaim{claim("a", "web", rule("a.test", "/")), claim("b", "web", rule("a.test", "/"))},
			held:   []api.IngressRoutes{held("b", "web", t0, rule("a.test", "/"))},
			want:   "a/web waits a.test/ for b/web\nb/web holds a.test/ since 1000",
		},
		{
			name:   "a holder that lets go hands over to the next claimant, from now",
			claims: []IngressClaim{claim("a", "web", rule("a.test", "/"))},
			held:   []api.IngressRoutes{held("b", "web", t0, rule("a.test", "/"))},
			want:   "a/web holds a.test/ since 2000",
		},
		{
			name:   "another path of the same host is another route",
			claims: []IngressClaim{claim("a", "web", rule("a.test", "/")), claim("b", "api", rule("a.test", "/api"))},
			held:   []api.IngressRoutes{held("a", "web", t0, rule("a.test", "/"))},
			want:   "a/web holds a.test/ since 1000\nb/api holds a.test/api since 2000",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(ResolveIngress(tc.claims, tc.held, t1)); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
