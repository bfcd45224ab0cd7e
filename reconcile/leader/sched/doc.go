// Package sched is KAT's scheduler: it decides on which nodes a
// workload's new instances run. It is a pure function over plain values: the
// candidate nodes with what is already placed on them, one workload's
// request and a source of randomness in, placements out. It reads no etcd
// and keeps no state; the leader's placement loop gathers the nodes, calls
// it once per workload and writes the result.
//
//	req, err := sched.NewRequest("default/web", &q.Workload.Spec, 3)
//	if err != nil { ... }
//	res := sched.Place(nodes, req, rand.New(rand.NewPCG(seed, 0)))
//	sched.Apply(nodes, req, res.Placements) // before placing the next workload
//	if res.Unplaced > 0 {
//		// res.Reason: "3 nodes: 2 insufficient memory, 1 taint dedicated=gpu:NoSchedule"
//	}
//
// # Filter
//
// A node is a candidate for an instance when, in this order: it is ready;
// it is not cordoned; its labels hold every pair of the request's
// nodeSelector; every taint with effect NoSchedule is tolerated; it has a GPU
// of the requested driver with at least minVRAM_MB, when a GPU is requested;
// its allocatable CPU and memory minus what is already placed there holds
// the request (a node is never over-committed, and a request of zero always
// fits); one of those GPUs is free; and, on a node with an overlay subnet
// (Node.Subnet), one of its addresses is free (a node awaiting its subnet,
// Node.NoSubnet, fits none). Each GPU instance takes one whole
// GPU. The first rule a node fails is its reason in [Result.Reason].
//
// # Score
//
// Among the candidates the scheduler picks, in this order of preference: a
// node without untolerated PreferNoSchedule taints that the request does not
// avoid (Request.Avoid: where the instances it replaces failed); the "most empty" node,
// the one with the largest sum of free CPU and free memory fractions after
// the placement (each in steps of 1/10000, so near-equal nodes tie); the
// node with fewer instances of the same workload; then one of the remaining
// ties at random. Every pick updates the accounting of the node it chose, so
// the replicas of one request spread over equal nodes (their counts differ
// by at most one) and never exceed a node's capacity.
//
// # DaemonService
//
// A DaemonService runs one instance on every eligible node: [Eligible]
// filters, and [Place] gives an instance to each eligible node that has none.
package sched
