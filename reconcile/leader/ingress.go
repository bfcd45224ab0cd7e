package leader

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// ingressRoutes is the ingress loop: it keeps /kat/ingress/routes/ in line
// with every VirtualLoadBalancer's spec.ingress and the ready instances
// behind it (docs/architecture.md "Ingress"). It is the records' only
// writer. Its rules come from the desired spec, so a rule removed from the
// spec leaves at once; its backends are the instances DNSReady admits, each
// on the port its own spec gives the rule, so a leaving instance (LeavingAt
// set) is unrouted in the pass that sees it, a drain delay before its
// container is stopped.
type ingressRoutes struct {
	l *Leader
	// cache is the view's: the status reads the conflicts from it.
	cache *store.Cache[api.IngressRoutes]
}

func newIngressRoutes(l *Leader) *ingressRoutes {
	return &ingressRoutes{l: l, cache: l.view.ingress}
}

// run runs the loop until ctx ends; the view runs the cache.
func (ir *ingressRoutes) run(ctx context.Context, sub *subscription) error {
	return ir.l.loop(ctx, sub, "ingress", ir.once)
}

// once recomputes every workload's routes (conflicts tie workloads
// together, and the workloads with ingress rules are few), writes the
// records that differ and deletes those of workloads that claim nothing,
// then waits until the cache holds the write.
func (ir *ingressRoutes) once(ctx context.Context, _ []string) error {
	have, _ := ir.cache.Snapshot()
	var claims []IngressClaim
	var keep []api.IngressRoutes // records of workloads caught between meta and files
	now := ir.l.cfg.Now()
	ready := map[string]bool{}
	for _, key := range ir.l.view.desired.Keys() {
		w, ok := ir.l.view.workload(key)
		if !ok {
			continue
		}
		if w.Spec == nil {
			if old, ok := have[resources.IngressRoutesKey(w.Meta.Namespace, w.Meta.Name)]; ok {
				keep = append(keep, old)
			}
			continue
		}
		if len(w.Spec.Ingress) == 0 {
			continue
		}
		claims = append(claims, ir.claimOf(w, ready, now))
	}
	want := append(ResolveIngress(claims, slices.Collect(maps.Values(have)), now), keep...)
	var put []api.IngressRoutes
	wanted := map[string]bool{}
	for _, r := range want {
		k := resources.IngressRoutesKey(r.Namespace, r.Workload)
		wanted[k] = true
		if old, ok := have[k]; !ok || !old.Equal(r) {
			put = append(put, r)
		}
	}
	var del []string
	for k := range have {
		if !wanted[k] {
			del = append(del, k)
		}
	}
	slices.Sort(del)
	if len(put) == 0 && len(del) == 0 {
		return nil
	}
	rev, err := ir.l.cfg.Repo.WriteIngressRoutes(ctx, put, del)
	if err != nil {
		return err
	}
	ir.l.cfg.Logger.Info().Str("component", "ingress").Int("put", len(put)).Int("removed", len(del)).Msg("ingress routes written")
	if events := IngressEvents(slices.Collect(maps.Values(have)), want); len(events) > 0 {
		if err := ir.l.cfg.Repo.AppendEvents(ctx, events); err != nil && ctx.Err() == nil {
			ir.l.cfg.Logger.Warn().Err(err).Str("component", "ingress").Msg("cannot record the ingress events")
		}
	}
	return ir.cache.WaitRevision(ctx, rev)
}

// claimOf returns the rules of w's spec.ingress with their ready backends.
// ready caches the nodes' readiness for the pass.
func (ir *ingressRoutes) claimOf(w workload, ready map[string]bool, now time.Time) IngressClaim {
	c := IngressClaim{Namespace: w.Meta.Namespace, Workload: w.Meta.Name}
	live, _ := ir.l.view.dnsReadyOf(w.Key(), ready, now)
	slices.SortFunc(live, func(a, b api.Assignment) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	for i, in := range w.Spec.Ingress {
		rule := api.IngressRule{
			Host: strings.ToLower(in.Host), Path: in.Path, Field: fmt.Sprintf("spec.ingress[%d]", i),
			PortName: in.ServicePortName, Port: in.ServicePort, TLS: in.TLS,
		}
		if in.TLS {
			rule.TLSCertificate = in.TLSCertificate
			kind, name := rule.TLSSource()
			if cert, ok := ir.l.view.certs.Get(resources.IngressCertificateKey(kind, name)); ok && cert.Fingerprint != "" && cert.Covers(rule.Host) {
				rule.Certificate = cert.Fingerprint
			}
		}
		if rule.Port != 0 {
			rule.PortName = "" // servicePort overrides servicePortName
		} else {
			rule.Port = w.Spec.NamedTCPPorts[rule.PortName]
		}
		for _, a := range live {
			if port := ir.backendPort(a, rule); port != 0 {
				rule.Backends = append(rule.Backends, api.IngressBackend{
					InstanceID: a.InstanceID, Node: a.Node, Addr: netip.AddrPortFrom(a.IP, uint16(port)),
				})
			}
		}
		c.Rules = append(c.Rules, rule)
	}
	return c
}

// backendPort is the port the spec of assignment a gives rule's port: its
// port of that name, or the number when a TCP port of a's spec has it; 0
// when a's spec has no such port (an old instance whose spec lacks a
// renamed port is no backend of the rule).
func (ir *ingressRoutes) backendPort(a api.Assignment, rule api.IngressRule) int {
	s := ir.l.view.specs.get(api.WorkloadMeta{Namespace: a.Namespace, Name: a.Workload, SpecHash: a.SpecHash}, a.Files)
	if s == nil {
		return 0
	}
	if rule.PortName != "" {
		return s.NamedTCPPorts[rule.PortName]
	}
	if s.TCPPorts[rule.Port] {
		return rule.Port
	}
	return 0
}
