package leader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestIngressEvents: a pass's events name each route a workload began or
// stopped to hold and each new conflict, once.
func TestIngressEvents(t *testing.T) {
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	rec := func(wl string, rules []api.IngressRule, conflicts ...api.IngressConflict) api.IngressRoutes {
		return api.IngressRoutes{Namespace: "default", Workload: wl, Rules: rules, Conflicts: conflicts}
	}
	r := func(host, path string) api.IngressRule {
		return api.IngressRule{Host: host, Path: path, Port: 8080, PortName: "http", Field: "spec.ingress[0]"}
	}
	conflict := api.IngressConflict{Host: "a.test", Path: "/", Field: "spec.ingress[0]", HeldBy: "default/web-a", Since: since}
	render := func(evs []api.Event) string {
		var b strings.Builder
		for _, e := range evs {
			fmt.Fprintf(&b, "%s %s %s: %s\n", e.Type, e.Object, e.Reason, e.Message)
		}
		return b.String()
	}
	for _, tc := range []struct {
		name       string
		have, want []api.IngressRoutes
		events     string
	}{{
		name: "nothing changed",
		have: []api.IngressRoutes{rec("web-a", []api.IngressRule{r("a.test", "/")}), rec("web-c", nil, conflict)},
		want: []api.IngressRoutes{rec("web-a", []api.IngressRule{r("a.test", "/")}), rec("web-c", nil, conflict)},
	}, {
		name: "a route added, one removed, a conflict",
		have: []api.IngressRoutes{rec("web-a", []api.IngressRule{r("a.test", "/"), r("a.test", "/old")})},
		want: []api.IngressRoutes{rec("web-a", []api.IngressRule{r("a.test", "/"), r("a.test", "/api")}), rec("web-c", nil, conflict)},
		events: "Normal workload/default/web-a IngressRouteAdded: ingress routes a.test/api to default/web-a (port http)\n" +
			"Normal workload/default/web-a IngressRouteRemoved: ingress no longer routes a.test/old to default/web-a\n" +
			"Warning workload/default/web-c IngressConflict: spec.ingress[0] a.test/ of default/web-c is served by default/web-a (since 2026-11-27T12:00:00Z); this rule is not routed until default/web-a lets it go\n",
	}, {
		name: "a deleted workload's routes removed, the claimant takes them",
		have: []api.IngressRoutes{rec("web-a", []api.IngressRule{r("a.test", "/")}), rec("web-c", nil, conflict)},
		want: []api.IngressRoutes{rec("web-c", []api.IngressRule{r("a.test", "/")})},
		events: "Normal workload/default/web-a IngressRouteRemoved: ingress no longer routes a.test/ to default/web-a\n" +
			"Normal workload/default/web-c IngressRouteAdded: ingress routes a.test/ to default/web-c (port http)\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(IngressEvents(tc.have, tc.want)); got != tc.events {
				t.Errorf("events:\n%s\nwant:\n%s", got, tc.events)
			}
		})
	}
}
