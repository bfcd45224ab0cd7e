package haproxy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"kat.dws.rip/kat/api"
)

// Desired is what HAProxy should route: map entries ("host/path" to a
// backend key, "ns/workload:port") and each backend key's servers (by
// instance ID, "ip:port").
type Desired struct {
	Exact, Prefix map[string]string
	Backends      map[string]map[string]string
	// Rules is the number of rules (host and path) routed.
	Rules int
}

// DesiredOf returns what the routes records ask for. A rule with path "/"
// is one prefix entry "host/"; another path "/p" is the exact entry
// "host/p" and the prefix entry "host/p/", so "/p" matches "/p" and
// "/p/..." but not "/px". A backend key without servers still gets its
// entries: its requests find no server (503), as they should.
func DesiredOf(routes []api.IngressRoutes) Desired {
	d := Desired{Exact: map[string]string{}, Prefix: map[string]string{}, Backends: map[string]map[string]string{}}
	for _, r := range routes {
		for _, rule := range r.Rules {
			b := rule.Backend(r.Namespace, r.Workload)
			d.Rules++
			if rule.Path == "/" {
				d.Prefix[rule.Host+"/"] = b
			} else {
				d.Exact[rule.Host+rule.Path] = b
				d.Prefix[rule.Host+rule.Path+"/"] = b
			}
			if d.Backends[b] == nil {
				d.Backends[b] = map[string]string{}
			}
			for _, be := range rule.Backends {
				d.Backends[b][be.InstanceID] = be.Addr.String()
			}
		}
	}
	return d
}

// Observed is what HAProxy has: its map entries (to slot names), the
// servers of its pool's backends and the pool's size.
type Observed struct {
	Exact, Prefix map[string]string
	Servers       map[string]map[string]Server
	Slots         int
}

// Starting is the state of a proxy started from run files written for d
// (RunFiles) with a pool of slots: each backend key of d in a slot of its
// own, with its servers, and the map entries routing to it. Keys that do
// not fit the pool are left out (Plan reports them once the proxy runs).
// It is pure.
func Starting(d Desired, slots int) Observed {
	slotOf := assignSlots(d, Observed{}, slots)
	o := Observed{Exact: map[string]string{}, Prefix: map[string]string{}, Servers: map[string]map[string]Server{}, Slots: slots}
	for b, slot := range slotOf {
		o.Servers[slot] = map[string]Server{}
		for id, addr := range d.Backends[b] {
			o.Servers[slot][id] = Server{Addr: addr}
		}
	}
	for _, m := range []struct{ want, have map[string]string }{{d.Exact, o.Exact}, {d.Prefix, o.Prefix}} {
		for k, b := range m.want {
			if slot, ok := slotOf[b]; ok {
				m.have[k] = slot
			}
		}
	}
	return o
}

// serverOptions are every server's: dynamic servers inherit no
// default-server line in 2.6, so each carries its own.
const serverOptions = "check inter 1s fall 2 rise 1"

// Plan returns the runtime commands that bring o to d, in the order to run
// them, for a proxy whose run directory is dir (as HAProxy sees it) and
// whose pool has slots backends. Each backend key keeps the slot o routes
// it to, or whose servers it shares; a new one takes a free slot (no
// entries, no servers). New servers are added before the entries that
// route to them, and servers are put in maintenance (requests in flight
// finish) and deleted after the entries that routed to them went; a
// deletion HAProxy refuses while connections remain is retried next pass.
// err is set when the pool is full: the backend keys without a slot are
// left out. It is pure.
func Plan(d Desired, o Observed, dir string, slots int) (cmds []string, err error) {
	exact, prefix := dir+"/"+ExactMap, dir+"/"+PrefixMap
	slotOf := assignSlots(d, o, slots)
	var full []string
	for b := range d.Backends {
		if _, ok := slotOf[b]; !ok {
			full = append(full, b)
		}
	}
	// Servers to add or replace.
	for _, b := range slices.Sorted(maps.Keys(d.Backends)) {
		slot, ok := slotOf[b]
		if !ok {
			continue
		}
		have := o.Servers[slot]
		for _, id := range slices.Sorted(maps.Keys(d.Backends[b])) {
			addr := d.Backends[b][id]
			s, ok := have[id]
			switch {
			case ok && s.Addr == addr && !s.Maint:
				continue
			case ok && s.Addr == addr:
				cmds = append(cmds, "set server "+slot+"/"+id+" state ready")
				continue
			case ok: // another address: the instance's own can not change, but heal it
				cmds = append(cmds, "set server "+slot+"/"+id+" state maint", "del server "+slot+"/"+id)
			}
			cmds = append(cmds,
				"add server "+slot+"/"+id+" "+addr+" "+serverOptions,
				"enable health "+slot+"/"+id,
				"enable server "+slot+"/"+id)
		}
	}
	// Map entries.
	mapCmds := func(file string, want, have map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(want)) {
			slot, ok := slotOf[want[k]]
			if !ok {
				continue
			}
			switch old, ok := have[k]; {
			case !ok:
				cmds = append(cmds, "add map "+file+" "+k+" "+slot)
			case old != slot:
				cmds = append(cmds, "set map "+file+" "+k+" "+slot)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(have)) {
			if _, ok := slotOf[want[k]]; !ok {
				cmds = append(cmds, "del map "+file+" "+k)
			}
		}
	}
	mapCmds(exact, d.Exact, o.Exact)
	mapCmds(prefix, d.Prefix, o.Prefix)
	// Servers to drain and remove.
	owner := map[string]string{}
	for b, slot := range slotOf {
		owner[slot] = b
	}
	for _, slot := range slices.Sorted(maps.Keys(o.Servers)) {
		want := d.Backends[owner[slot]]
		for _, id := range slices.Sorted(maps.Keys(o.Servers[slot])) {
			if _, ok := want[id]; ok {
				continue
			}
			if !o.Servers[slot][id].Maint {
				cmds = append(cmds, "set server "+slot+"/"+id+" state maint")
			}
			cmds = append(cmds, "del server "+slot+"/"+id)
		}
	}
	if len(full) > 0 {
		slices.Sort(full)
		err = fmt.Errorf("the pool of %d backends is full: %s not routed", slots, strings.Join(full, ", "))
	}
	return cmds, err
}

// assignSlots gives each backend key of d a slot of the pool: the one o's
// entries route its entries to, else the one holding most of its servers,
// else the first free one.
func assignSlots(d Desired, o Observed, slots int) map[string]string {
	taken := map[string]bool{}
	slotOf := map[string]string{}
	votes := map[string]map[string]int{} // backend key -> slot -> votes
	vote := func(b, slot string) {
		if votes[b] == nil {
			votes[b] = map[string]int{}
		}
		votes[b][slot]++
	}
	for _, m := range []struct{ want, have map[string]string }{{d.Exact, o.Exact}, {d.Prefix, o.Prefix}} {
		for k, b := range m.want {
			if slot, ok := m.have[k]; ok {
				vote(b, slot)
			}
		}
	}
	for b, servers := range d.Backends {
		for slot, have := range o.Servers {
			for id := range servers {
				if _, ok := have[id]; ok {
					vote(b, slot)
				}
			}
		}
	}
	keys := slices.Sorted(maps.Keys(d.Backends))
	for _, b := range keys {
		var best string
		for _, slot := range slices.Sorted(maps.Keys(votes[b])) {
			if !taken[slot] && isSlot(slot, slots) && (best == "" || votes[b][slot] > votes[b][best]) {
				best = slot
			}
		}
		if best != "" {
			slotOf[b], taken[best] = best, true
		}
	}
	used := map[string]bool{}
	for _, m := range []map[string]string{o.Exact, o.Prefix} {
		for _, slot := range m {
			used[slot] = true
		}
	}
	for slot, servers := range o.Servers {
		if len(servers) > 0 {
			used[slot] = true
		}
	}
	next := 0
	for _, b := range keys {
		if _, ok := slotOf[b]; ok {
			continue
		}
		for next < slots && (taken[SlotName(next)] || used[SlotName(next)]) {
			next++
		}
		if next == slots {
			break
		}
		slotOf[b], taken[SlotName(next)] = SlotName(next), true
	}
	return slotOf
}

// isSlot reports whether name is a backend of a pool of slots.
func isSlot(name string, slots int) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "kat_b"))
	return err == nil && name == SlotName(n) && n >= 0 && n < slots
}
