package agent

import (
	"slices"
	"sync"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// loadBalancerPorts returns the container ports of q's VirtualLoadBalancer,
// the ports its containers publish on the host; nil without one.
func loadBalancerPorts(q *quadlet.Quadlet) []int {
	if q.LoadBalancer == nil {
		return nil
	}
	out := make([]int, 0, len(q.LoadBalancer.Spec.Ports))
	for _, p := range q.LoadBalancer.Spec.Ports {
		out = append(out, p.ContainerPort)
	}
	return out
}

// fixedHostPorts returns the host ports a container of q publishes at their
// own number: a DaemonService's VirtualLoadBalancer ports; nil for other
// workloads, whose ports move to a spare one when taken.
func fixedHostPorts(q *quadlet.Quadlet) []int {
	if q == nil || q.Workload.Spec.Type != quadlet.TypeDaemonService {
		return nil
	}
	return loadBalancerPorts(q)
}

// heldByLeaving reports whether a container of another instance that is
// leaving the node (no longer assigned, or its removal under way) still
// publishes one of ports. A create that needs those ports at their own
// number waits for that removal: it is stop-first on the node, and a
// container started beside the old one would fail to bind. Callers hold
// t.mu.
func (t *instanceTable) heldByLeaving(id string, ports []int) bool {
	for k, c := range t.containers {
		if _, assigned := t.assigned[k]; k == id || (assigned && t.busy[k] != stepRemove) {
			continue
		}
		for _, p := range c.Ports {
			if slices.Contains(ports, p.HostPort) {
				return true
			}
		}
	}
	return false
}

// reserveHostPorts picks the host port of each container port of a new
// container of instance id (pickHostPorts) and reserves them for it, apart
// from every port the node's containers publish and every port reserved
// already, until releaseHostPorts or a listing that shows the container.
// hostFree tells whether a port is free on the host. With fixed (a
// DaemonService) every port is published at its own number.
func (t *instanceTable) reserveHostPorts(id string, ports []int, fixed bool, hostFree func(int) bool, spare runtime.PortRange) map[int]int {
	if len(ports) == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	used := map[int]bool{}
	for _, c := range t.containers {
		for _, p := range c.Ports {
			used[p.HostPort] = true
		}
	}
	for p := range t.reserved {
		used[p] = true
	}
	var out map[int]int
	if fixed {
		// Never a fallback port: a clash fails the container, which is
		// retried, instead of moving a proxy off 80.
		out = make(map[int]int, len(ports))
		for _, p := range ports {
			out[p] = p
		}
	} else {
		out = pickHostPorts(ports, used, hostFree, spare)
	}
	for _, host := range out {
		t.reserved[host] = id
	}
	return out
}

// releaseHostPorts ends the reservations of instance id: its create failed.
func (t *instanceTable) releaseHostPorts(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, owner := range t.reserved {
		if owner == id {
			delete(t.reserved, p)
		}
	}
}

// pickHostPorts chooses the host port of each container port: the port
// itself while it is not used (published or reserved on this node) and
// hostFree says it is free on the host, otherwise a port of spare that is
// not used. A port without a choice (spare used up) is left out: the
// runtime then publishes the container port and reports the clash. Until
// the overlay exists this is how several replicas share a node. It marks
// what it picks in used.
func pickHostPorts(ports []int, used map[int]bool, hostFree func(int) bool, spare runtime.PortRange) map[int]int {
	out := map[int]int{}
	for _, port := range ports {
		host := port
		if used[host] || !hostFree(host) {
			host = spare.Pick(func(p int) bool { return used[p] })
		}
		if host == 0 {
			continue
		}
		used[host] = true
		out[port] = host
	}
	return out
}

// clashMemory is how long a host port a start found taken is not picked
// again. What took it is unknown (a process of the host, or a container
// this agent has not listed yet), and the check that a port is free can
// pass for one that will be taken again.
const clashMemory = time.Minute

// portClashes are host ports starts found taken, until when each is
// avoided. It has a lock of its own: reserveHostPorts asks it while it
// holds the table's.
type portClashes struct {
	mu    sync.Mutex
	until map[int]time.Time
}

// taken records ports as found taken at now.
func (c *portClashes) taken(ports []runtime.PortMapping, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = map[int]time.Time{}
	}
	for p, until := range c.until {
		if !until.After(now) {
			delete(c.until, p)
		}
	}
	for _, p := range ports {
		if p.HostPort != 0 {
			c.until[p.HostPort] = now.Add(clashMemory)
		}
	}
}

// avoid tells whether port was found taken less than clashMemory before
// now.
func (c *portClashes) avoid(port int, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.until[port].After(now)
}
