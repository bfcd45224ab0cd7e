package sched

import (
	"cmp"
	"math/rand/v2"

	"kat.dws.rip/kat/quadlet"
)

// Place decides on which nodes req's new instances run: req.Count of them
// for a Service or Job, one on each eligible node without one for a
// DaemonService. It does not modify nodes; Apply adds the result to them
// before the next workload is placed. rng breaks ties between equal nodes;
// nil picks the first of them in the order of nodes. See the package
// documentation for the rules.
func Place(nodes []Node, req Request, rng *rand.Rand) Result {
	if req.Type == quadlet.TypeDaemonService {
		return placeDaemon(nodes, &req)
	}
	if req.Count <= 0 {
		return Result{}
	}
	cands := make([]candidate, 0, len(nodes))
	for i := range nodes {
		if staticCheck(&nodes[i], &req).failure == fits {
			cands = append(cands, newCandidate(i, &nodes[i], &req))
		}
	}
	res := Result{Placements: make([]Placement, 0, req.Count)}
	for range req.Count {
		best := pick(cands, &req, rng)
		if best < 0 {
			res.Unplaced = req.Count - len(res.Placements)
			res.Reason, res.Cause = explain(nodes, &req, candidateReasons(nodes, &req, cands))
			break
		}
		c := &cands[best]
		res.Placements = append(res.Placements, placement(&nodes[c.node], c.take(&req)))
	}
	return res
}

// pick returns the index in cands of the best candidate for one more
// instance, or -1 when none fits.
func pick(cands []candidate, req *Request, rng *rand.Rand) int {
	best, bestScore, ties := -1, int64(0), 0
	for i := range cands {
		c := &cands[i]
		if c.check(req) != fits {
			continue
		}
		s := c.score(req)
		if best >= 0 {
			b := &cands[best]
			order := cmp.Or(compareBool(c.preferred, b.preferred), cmp.Compare(s, bestScore), cmp.Compare(b.count, c.count))
			if order < 0 {
				continue
			}
			if order == 0 {
				// Reservoir sampling: each of the k ties seen so far
				// stays the pick with probability 1/k.
				ties++
				if rng == nil || rng.IntN(ties) != 0 {
					continue
				}
			} else {
				ties = 1
			}
		} else {
			ties = 1
		}
		best, bestScore = i, s
	}
	return best
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// placement returns the placement of an instance on n taking the GPU at
// index gpu of n.GPUs, or none when gpu is -1.
func placement(n *Node, gpu int) Placement {
	p := Placement{Node: n.Name, GPU: -1}
	if gpu >= 0 {
		p.GPU = n.GPUs[gpu].Index
	}
	return p
}

// candidateReasons returns the reason of each node: staticCheck's, or the
// resource rule its candidate now fails. cands are in the order of nodes,
// and the function must be called with ascending i, as explain does.
func candidateReasons(nodes []Node, req *Request, cands []candidate) func(i int) reason {
	next := 0
	return func(i int) reason {
		for next < len(cands) && cands[next].node < i {
			next++
		}
		if next < len(cands) && cands[next].node == i {
			return resourceReason(&nodes[i], cands[next].check(req))
		}
		return staticCheck(&nodes[i], req)
	}
}

// Eligible returns the names of the nodes that run an instance of the
// DaemonService req, in the order of nodes, and why the others do not
// (Result.Reason's form; empty when every node is eligible). A node passes
// every filter rule; a node without an instance of req.Key must also have
// room for one, while one that has an instance already is eligible without
// the resource rules, since what it runs is already counted.
func Eligible(nodes []Node, req Request) (names []string, why string) {
	ok, why, _, _ := eligible(nodes, &req)
	for _, c := range ok {
		names = append(names, nodes[c.node].Name)
	}
	return names, why
}

// eligible returns the candidates of the eligible nodes, the reasons of
// the others, and how many of those fail a resource rule only.
func eligible(nodes []Node, req *Request) (ok []candidate, why, cause string, full int) {
	reasons := make([]reason, len(nodes))
	failed := false
	for i := range nodes {
		n := &nodes[i]
		r := staticCheck(n, req)
		if r.failure == fits {
			c := newCandidate(i, n, req)
			if c.count == 0 {
				r = resourceReason(n, c.check(req))
			}
			if r.failure == fits {
				ok = append(ok, c)
			}
		}
		reasons[i] = r
		failed = failed || r.failure != fits
		if r.failure >= insufficientCPU {
			full++
		}
	}
	if !failed {
		return ok, "", "", 0
	}
	why, cause = explain(nodes, req, func(i int) reason { return reasons[i] })
	return ok, why, cause, full
}

// placeDaemon places one instance of req on each eligible node without
// one; the nodes that pass every rule but the resources are Unplaced.
func placeDaemon(nodes []Node, req *Request) Result {
	ok, why, cause, full := eligible(nodes, req)
	res := Result{Reason: why, Cause: cause, Unplaced: full}
	for i := range ok {
		if c := &ok[i]; c.count == 0 {
			res.Placements = append(res.Placements, placement(&nodes[c.node], c.take(req)))
		}
	}
	return res
}

// Apply adds placements of req, as Place returned them, to the usage of
// nodes, so that the next Place sees them: their requests, instance counts,
// GPUs and free addresses. It creates a node's Usage.Instances map if it is
// nil, and writes to it otherwise. Placements naming no node of nodes are ignored.
func Apply(nodes []Node, req Request, placements []Placement) {
	if len(placements) == 0 {
		return
	}
	byName := make(map[string]int, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = i
	}
	for _, p := range placements {
		i, ok := byName[p.Node]
		if !ok {
			continue
		}
		n := &nodes[i]
		n.Used.CPU += req.CPU
		n.Used.Memory += req.Memory
		if n.Used.Instances == nil {
			n.Used.Instances = map[string]int{}
		}
		n.Used.Instances[req.Key]++
		if n.Subnet.IsValid() && n.FreeIPs > 0 {
			n.FreeIPs--
		}
		if p.GPU < 0 {
			continue
		}
		for j := range n.GPUs {
			if n.GPUs[j].Index == p.GPU {
				n.GPUs[j].InUse = true
			}
		}
	}
}
