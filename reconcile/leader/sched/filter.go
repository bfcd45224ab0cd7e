package sched

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"kat.dws.rip/kat/quadlet"
)

// failure is the first filter rule a node fails, in the order the rules
// run; fits when it fails none.
type failure uint8

const (
	fits failure = iota
	notReady
	cordoned
	selectorMismatch
	untoleratedTaint
	noGPU
	// The resource rules come last: eligible counts the failures from
	// insufficientCPU on as a lack of room.
	insufficientCPU
	insufficientMemory
	gpusInUse
	subnetFull
	// noSubnet is a resource rule too: a node without its subnet keeps
	// the instances it has.
	noSubnet
)

// reason is a failure with what its message needs.
type reason struct {
	failure failure
	// taint is the first untolerated NoSchedule taint.
	taint Taint
	// subnet is the node's full subnet.
	subnet netip.Prefix
}

// resourceReason is failure f of a resource rule on n.
func resourceReason(n *Node, f failure) reason {
	r := reason{failure: f}
	if f == subnetFull {
		r.subnet = n.Subnet
	}
	return r
}

// text returns the reason as Result.Reason writes it.
func (r reason) text(req *Request) string {
	switch r.failure {
	case notReady:
		return "not ready"
	case cordoned:
		return "cordoned"
	case selectorMismatch:
		return "nodeSelector mismatch"
	case untoleratedTaint:
		return "taint " + r.taint.String()
	case noGPU:
		s := "no gpu"
		if d := req.GPU.Driver; d != "" && d != "any" {
			s = "no " + d + " gpu"
		}
		if req.GPU.MinVRAMMB > 0 {
			s += " with " + strconv.Itoa(req.GPU.MinVRAMMB) + " MiB"
		}
		return s
	case insufficientCPU:
		return "insufficient cpu"
	case insufficientMemory:
		return "insufficient memory"
	case gpusInUse:
		return "gpus in use"
	case noSubnet:
		return "no overlay subnet yet"
	case subnetFull:
		return "subnet " + r.subnet.String() + " full"
	}
	return "fits"
}

// staticCheck runs the rules that placing instances cannot change: all but
// the resource rules.
func staticCheck(n *Node, req *Request) reason {
	switch {
	case !n.Ready:
		return reason{failure: notReady}
	case n.Cordoned:
		return reason{failure: cordoned}
	}
	for k, v := range req.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return reason{failure: selectorMismatch}
		}
	}
	for _, t := range n.Taints {
		if t.Effect == NoSchedule && !tolerated(req.Tolerations, t) {
			return reason{failure: untoleratedTaint, taint: t}
		}
	}
	if req.GPU != nil && !slices.ContainsFunc(n.GPUs, func(g GPU) bool { return gpuMatches(req.GPU, g) }) {
		return reason{failure: noGPU}
	}
	return reason{}
}

// tolerated reports whether one of tols tolerates t.
func tolerated(tols []quadlet.Toleration, t Taint) bool {
	for _, tol := range tols {
		if tol.Effect != "" && tol.Effect != t.Effect {
			continue
		}
		switch tol.Operator {
		case "", "Exists":
			if tol.Key == "" || tol.Key == t.Key {
				return true
			}
		case "Equal":
			if tol.Key == t.Key && tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// preferred reports whether the node has no untolerated PreferNoSchedule
// taint and is not one req avoids.
func preferred(n *Node, req *Request) bool {
	if req.Avoid[n.Name] {
		return false
	}
	for _, t := range n.Taints {
		if t.Effect == PreferNoSchedule && !tolerated(req.Tolerations, t) {
			return false
		}
	}
	return true
}

// gpuMatches reports whether g has the driver and the memory want asks for,
// in use or not.
func gpuMatches(want *quadlet.GPU, g GPU) bool {
	if d := want.Driver; d != "" && d != "any" && !strings.EqualFold(d, g.Driver) {
		return false
	}
	return g.VRAMMiB >= want.MinVRAMMB
}

// scoreSteps is how many steps a free fraction of one resource is worth.
const scoreSteps = 10000

// candidate is a node that passed staticCheck, with its accounting as
// instances are placed on it.
type candidate struct {
	node      int // index in the nodes given to Place
	preferred bool
	// freeCPU and freeMem are allocatable minus placed; negative when the
	// node is already over-committed.
	freeCPU, freeMem int64
	// cpuScale and memScale turn a free amount into score steps; 0 on a
	// node without that resource.
	cpuScale, memScale float64
	// count is the node's instances of the request's workload.
	count int
	// gpus are the indexes in Node.GPUs of the free matching GPUs, the
	// smallest first: an instance takes the first.
	gpus []int
	// freeIPs are the node's free addresses; -1: addresses do not count.
	freeIPs int
	// noSubnet: the node awaits its subnet (Node.NoSubnet).
	noSubnet bool
}

func newCandidate(i int, n *Node, req *Request) candidate {
	c := candidate{
		node: i, preferred: preferred(n, req),
		freeCPU: n.CPU - n.Used.CPU, freeMem: n.Memory - n.Used.Memory,
		count: n.Used.Instances[req.Key], freeIPs: -1,
	}
	if n.Subnet.IsValid() {
		c.freeIPs = n.FreeIPs
	} else {
		c.noSubnet = n.NoSubnet
	}
	if n.CPU > 0 {
		c.cpuScale = scoreSteps / float64(n.CPU)
	}
	if n.Memory > 0 {
		c.memScale = scoreSteps / float64(n.Memory)
	}
	if req.GPU != nil {
		for j, g := range n.GPUs {
			if !g.InUse && gpuMatches(req.GPU, g) {
				c.gpus = append(c.gpus, j)
			}
		}
		slices.SortStableFunc(c.gpus, func(a, b int) int { return cmp.Compare(n.GPUs[a].VRAMMiB, n.GPUs[b].VRAMMiB) })
	}
	return c
}

// check returns the first resource rule that keeps one more instance off
// the candidate.
func (c *candidate) check(req *Request) failure {
	switch {
	case req.CPU > 0 && c.freeCPU < req.CPU:
		return insufficientCPU
	case req.Memory > 0 && c.freeMem < req.Memory:
		return insufficientMemory
	case req.GPU != nil && len(c.gpus) == 0:
		return gpusInUse
	case c.freeIPs == 0:
		return subnetFull
	case c.noSubnet:
		return noSubnet
	}
	return fits
}

// score is how empty the candidate is after one more instance: the sum of
// its free CPU and memory fractions, in steps.
func (c *candidate) score(req *Request) int64 {
	return int64(float64(c.freeCPU-req.CPU)*c.cpuScale) + int64(float64(c.freeMem-req.Memory)*c.memScale)
}

// take places one instance on the candidate and returns the Node.GPUs
// index of the GPU it takes, or -1.
func (c *candidate) take(req *Request) int {
	c.freeCPU -= req.CPU
	c.freeMem -= req.Memory
	c.count++
	if c.freeIPs > 0 {
		c.freeIPs--
	}
	if req.GPU == nil {
		return -1
	}
	g := c.gpus[0]
	c.gpus = c.gpus[1:]
	return g
}

// explain writes the reasons of the nodes: "3 nodes: 2 insufficient
// memory, 1 cordoned", the most frequent first, then by text. Each node
// counts once, under reasonOf(i). cause is the first reason's metric label.
func explain(nodes []Node, req *Request, reasonOf func(i int) reason) (text, cause string) {
	if len(nodes) == 0 {
		return "no nodes", "no_nodes"
	}
	counts := map[string]int{}
	failures := map[string]failure{}
	for i := range nodes {
		if r := reasonOf(i); r.failure != fits {
			t := r.text(req)
			counts[t]++
			failures[t] = r.failure
		}
	}
	texts := make([]string, 0, len(counts))
	for t := range counts {
		texts = append(texts, t)
	}
	slices.SortFunc(texts, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	var sb strings.Builder
	sb.WriteString(strconv.Itoa(len(nodes)))
	if len(nodes) == 1 {
		sb.WriteString(" node:")
	} else {
		sb.WriteString(" nodes:")
	}
	for i, t := range texts {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, " %d %s", counts[t], t)
	}
	if len(texts) > 0 {
		cause = failures[texts[0]].cause()
	}
	return sb.String(), cause
}

// cause names the failure for a metric label (Result.Cause): explain's
// first reason's.
func (f failure) cause() string {
	return [...]string{fits: "", notReady: "not_ready", cordoned: "cordoned", selectorMismatch: "node_selector",
		untoleratedTaint: "taint", noGPU: "no_gpu", insufficientCPU: "insufficient_cpu", insufficientMemory: "insufficient_memory",
		gpusInUse: "gpus_in_use", subnetFull: "subnet_full", noSubnet: "no_subnet"}[f]
}
