package haproxy

import (
	"context"
	"fmt"
	"testing"

	"kat.dws.rip/kat/api"
)

// BenchmarkApplyNewRoute measures one pass of the agent's updater against
// the real haproxy when a new host appears beside 50 routed ones: Observe,
// Plan and Exec, up to the route answering.
func BenchmarkApplyNewRoute(b *testing.B) {
	p := startProxy(b)
	addr := backend(b, "x", nil)
	var routes []api.IngressRoutes
	for i := range 50 {
		routes = append(routes, api.IngressRoutes{Namespace: "d", Workload: fmt.Sprintf("w%d", i), Rules: []api.IngressRule{
			{Host: fmt.Sprintf("h%d.test", i), Path: "/", Port: 80, Backends: []api.IngressBackend{{InstanceID: fmt.Sprintf("w%d-1", i), Addr: addr}}},
		}})
	}
	ctx := context.Background()
	apply := func(rs []api.IngressRoutes) {
		o, err := p.client.Observe(ctx, p.dir)
		if err != nil {
			b.Fatal(err)
		}
		cmds, err := Plan(DesiredOf(rs), o, p.dir, DefaultSlots)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.client.Exec(ctx, cmds); err != nil {
			b.Fatal(err)
		}
	}
	apply(routes)
	extra := api.IngressRoutes{Namespace: "d", Workload: "new", Rules: []api.IngressRule{
		{Host: "new.test", Path: "/", Port: 80, Backends: []api.IngressBackend{{InstanceID: "new-1", Addr: addr}}},
	}}
	b.ResetTimer()
	for b.Loop() {
		apply(append(routes, extra))
		b.StopTimer()
		apply(routes)
		b.StartTimer()
	}
}
