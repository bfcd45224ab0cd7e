package apiserver

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

func TestIngressViews(t *testing.T) {
	since := time.Unix(1000, 0).UTC()
	be := api.IngressBackend{InstanceID: "web-1", Node: "n1", Addr: netip.MustParseAddrPort("10.0.0.2:8080")}
	routes := []api.IngressRoutes{
		{Namespace: "d", Workload: "web", Rules: []api.IngressRule{
			{Host: "b.test", Path: "/", PortName: "http", Port: 8080, Since: since, Backends: []api.IngressBackend{be}},
			{Host: "a.test", Path: "/api", Port: 9090, Since: since},
		}},
		{Namespace: "d", Workload: "shop", Conflicts: []api.IngressConflict{{Host: "b.test", Path: "/", HeldBy: "d/web", Since: since}}},
	}
	var got []string
	for _, v := range IngressViews(routes, map[string]int{"d/web": 2, "d/shop": 1}) {
		got = append(got, fmt.Sprintf("%s%s %s %d/%d %s", v.Host, v.Path, v.Workload, v.Ready, v.Assigned, v.Status))
	}
	want := "a.test/api d/web 0/2 NoBackends\nb.test/ d/shop 0/1 Conflict: d/web\nb.test/ d/web 1/2 Routed"
	if strings.Join(got, "\n") != want {
		t.Errorf("views:\n%s\nwant\n%s", strings.Join(got, "\n"), want)
	}
}
