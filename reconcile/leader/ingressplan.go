package leader

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
)

// IngressClaim is the rules one workload's spec asks for, with the ready
// backends of each (Since is left zero: ResolveIngress sets it).
type IngressClaim struct {
	Namespace, Workload string
	Rules               []api.IngressRule
}

// Key is "ns/name".
func (c IngressClaim) Key() string { return c.Namespace + "/" + c.Workload }

// ResolveIngress decides which workload serves each host and path and
// returns the record of every claiming workload, sorted by key. The rule
// (docs/architecture.md "Ingress"): a host and path belongs to the
// workload whose record in held already holds it, while that workload
// still claims it; a free one goes to the first claimant by
// "namespace/name", from now. A rule another workload holds is listed in
// Conflicts, naming the holder. So no change to one workload's spec takes
// a route another serves, and Git's directory-by-directory writes (a host
// moved from one workload to another in one commit) end the same whatever
// their order. It is pure.
func ResolveIngress(claims []IngressClaim, held []api.IngressRoutes, now time.Time) []api.IngressRoutes {
	type holder struct {
		by    string
		since time.Time
	}
	routeKey := func(host, path string) string { return host + " " + path }
	holders := map[string]holder{}
	for _, r := range held {
		for _, rule := range r.Rules {
			holders[routeKey(rule.Host, rule.Path)] = holder{r.Namespace + "/" + r.Workload, rule.Since}
		}
	}
	claims = slices.Clone(claims)
	slices.SortFunc(claims, func(a, b IngressClaim) int { return strings.Compare(a.Key(), b.Key()) })
	claimed := map[string]map[string]bool{} // route -> claimants
	for _, c := range claims {
		for _, rule := range c.Rules {
			k := routeKey(rule.Host, rule.Path)
			if claimed[k] == nil {
				claimed[k] = map[string]bool{}
			}
			claimed[k][c.Key()] = true
		}
	}
	winner := map[string]holder{}
	for _, c := range claims { // in key order: the first claimant wins a free route
		for _, rule := range c.Rules {
			k := routeKey(rule.Host, rule.Path)
			if _, ok := winner[k]; ok {
				continue
			}
			if h, ok := holders[k]; ok && claimed[k][h.by] {
				winner[k] = h
			} else {
				winner[k] = holder{c.Key(), now}
			}
		}
	}
	out := make([]api.IngressRoutes, 0, len(claims))
	for _, c := range claims {
		r := api.IngressRoutes{Namespace: c.Namespace, Workload: c.Workload}
		for _, rule := range c.Rules {
			w := winner[routeKey(rule.Host, rule.Path)]
			if w.by != c.Key() {
				r.Conflicts = append(r.Conflicts, api.IngressConflict{
					Host: rule.Host, Path: rule.Path, Field: rule.Field, HeldBy: w.by, Since: w.since,
				})
				continue
			}
			rule.Since = w.since
			r.Rules = append(r.Rules, rule)
		}
		slices.SortFunc(r.Rules, func(a, b api.IngressRule) int {
			return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.Path, b.Path))
		})
		slices.SortFunc(r.Conflicts, func(a, b api.IngressConflict) int {
			return cmp.Or(strings.Compare(a.Host, b.Host), strings.Compare(a.Path, b.Path))
		})
		out = append(out, r)
	}
	return out
}

// IngressConflictMessage says why a rule is not routed, naming both
// workloads.
func IngressConflictMessage(ns, workload string, c api.IngressConflict) string {
	return fmt.Sprintf("%s %s%s of %s/%s is served by %s (since %s); this rule is not routed until %s lets it go",
		c.Field, c.Host, c.Path, ns, workload, c.HeldBy, c.Since.UTC().Format(time.RFC3339), c.HeldBy)
}

// IngressEvents returns the events of a pass that replaces the records
// have with want: each route (host and path) a workload began or stopped
// to hold, and each rule newly not routed because another workload holds
// it. It is pure.
func IngressEvents(have, want []api.IngressRoutes) []api.Event {
	type keyed = map[string]map[string]string // workload -> host+path -> message
	index := func(rs []api.IngressRoutes) (rules, conflicts keyed) {
		rules, conflicts = keyed{}, keyed{}
		for _, r := range rs {
			k := r.Namespace + "/" + r.Workload
			rules[k], conflicts[k] = map[string]string{}, map[string]string{}
			for _, rule := range r.Rules {
				port := strconv.Itoa(rule.Port)
				if rule.PortName != "" {
					port = rule.PortName
				}
				rules[k][rule.Host+rule.Path] = port
			}
			for _, c := range r.Conflicts {
				conflicts[k][c.Host+c.Path] = IngressConflictMessage(r.Namespace, r.Workload, c)
			}
		}
		return rules, conflicts
	}
	oldRules, oldConflicts := index(have)
	newRules, newConflicts := index(want)
	workloads := map[string]bool{}
	for k := range oldRules {
		workloads[k] = true
	}
	for k := range newRules {
		workloads[k] = true
	}
	var events []api.Event
	for _, k := range slices.Sorted(maps.Keys(workloads)) {
		ns, name, _ := strings.Cut(k, "/")
		ref := api.WorkloadRef(ns, name, "")
		for _, route := range slices.Sorted(maps.Keys(newRules[k])) {
			if _, ok := oldRules[k][route]; !ok {
				events = append(events, ref.Eventf(api.EventNormal, api.ReasonIngressRouteAdded,
					"ingress routes %s to %s (port %s)", route, k, newRules[k][route]))
			}
		}
		for _, route := range slices.Sorted(maps.Keys(oldRules[k])) {
			if _, ok := newRules[k][route]; !ok {
				events = append(events, ref.Eventf(api.EventNormal, api.ReasonIngressRouteRemoved,
					"ingress no longer routes %s to %s", route, k))
			}
		}
		for _, route := range slices.Sorted(maps.Keys(newConflicts[k])) {
			if old, ok := oldConflicts[k][route]; !ok || old != newConflicts[k][route] {
				events = append(events, ref.Eventf(api.EventWarning, api.ReasonIngressConflict, "%s", newConflicts[k][route]))
			}
		}
	}
	return events
}
