package leader

import (
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// AssignmentPlan is what the leader writes to /kat/assignments: instances to
// add and instances to remove; and what the scheduler found for each
// workload it planned, for the workloads' statuses.
type AssignmentPlan struct {
	Put    []api.Assignment
	Delete []api.Assignment
	// Leave are instances taken out of service: their assignments are
	// written again with LeavingAt set, and deleted by a later plan once
	// the drain delay has passed.
	Leave []api.Assignment
	// Scheduling is, by "ns/name", what placement found for each workload
	// planned (not those left alone).
	Scheduling map[string]Scheduling
	// Jobs are the Jobs' run and schedule records to write once the
	// assignments are written.
	Jobs []JobWrite
	// DaemonRollouts are the DaemonServices' node-by-node update records
	// to write, DropDaemonRollouts ("ns/name") those to delete; written
	// before the assignments, so a record is never behind what runs.
	DaemonRollouts     []api.DaemonRolloutRecord
	DropDaemonRollouts []string
	// Rollouts are, by "ns/name", the rollout records that changed.
	Rollouts map[string]api.Rollout
	// Rollbacks are the failed rollouts to roll back, by applying an
	// earlier generation's files again.
	Rollbacks []Rollback
	// Wake is, by "ns/name", when a workload wants another pass though no
	// fact changes: a drain delay or a progress deadline ends.
	Wake map[string]time.Time
	// Replaced are the failed instances deleted to be replaced (also in
	// Delete), for their events.
	Replaced []api.Assignment
	// Orphaned are the workloads ("ns/name") not in Desired whose
	// assignments the plan deletes. The view's copies of workloads and
	// assignments are two watches, and a workload written with its
	// assignments (a detached node's hand-back) may show its assignments
	// first: the caller confirms each absent from etcd before it writes
	// the plan, and otherwise drops that workload's part.
	Orphaned []string
}

// Rollback asks to replace workload Key's generation From by the files of
// generation To.
type Rollback struct {
	Key      string
	From, To int64
}

// Scheduling is what placement found for one workload.
type Scheduling struct {
	// Desired is how many instances the workload has once the plan is
	// written and placed: replicas, or for a DaemonService its eligible
	// nodes.
	Desired int
	// Unplaced counts the instances no node could take: Pending.
	Unplaced int
	// Reason is the scheduler's reason when Unplaced > 0 (sched.Result),
	// and Cause its metric label.
	Reason string
	Cause  string
}

// Empty reports whether the plan changes no assignment.
func (p AssignmentPlan) Empty() bool {
	return len(p.Put) == 0 && len(p.Delete) == 0 && len(p.Leave) == 0 && len(p.Jobs) == 0
}

// AssignInput is what PlanAssignments decides from.
type AssignInput struct {
	// Nodes are the registered nodes as the scheduler sees them
	// (SchedNodes), Used counting every current assignment, planned or
	// not; their Used.Instances are ignored (counted from Current).
	Nodes []sched.Node
	// Draining are the names of the nodes being drained.
	Draining map[string]bool
	// Departed are the names of the nodes whose agent departed for good
	// (api.NodeRegistration.DepartedAt): no DaemonService instance stays
	// on one, or is wanted there.
	Departed map[string]bool
	// Detachable are the names of the nodes that may run detached when
	// lost (api.NodeRegistration.MayDetach): a Job's instance on one that
	// is not Ready is waited for, not given up.
	Detachable map[string]bool
	// Desired is every workload's desired state with its parsed spec.
	Desired []workload
	// Current are the assignments of the planned workloads, on every node.
	Current []api.Assignment
	// Reported are the agents' reports, by instance ID: old instances are
	// removed only once enough new ones are ready.
	Reported map[string]api.InstanceStatus
	// DrainDelay is how long an instance stays out of every ready list
	// before it is stopped; 0 stops it at once.
	DrainDelay time.Duration
	// Rollouts are, by "ns/name", the stored rollout records.
	Rollouts map[string]api.Rollout
	// Commits are, by "ns/name", the app commits the leader resolved for
	// workloads built from Git; such a workload without one is left alone.
	Commits map[string]string
	// HeldIPs returns the addresses held on a node (by the assignments of
	// every workload, planned or not, and /kat/ipam) and those released
	// lately, which are handed out last. Nodes[i].Subnet is where a node's
	// new instances get their addresses; nil: only Current's are held.
	HeldIPs func(node string) (held, cooling []netip.Addr)
	// SlotUsed reports whether an assignment of any workload, planned or
	// not, holds a user-namespace slot; nil: only Current's do. A plan of
	// some workloads gets only their assignments in Current.
	SlotUsed func(slot int) bool
	// Now stamps new assignments; NewSuffix makes their IDs unique.
	Now       time.Time
	NewSuffix func() string
	// Rand breaks ties between equal nodes; nil takes the first in the
	// order of Nodes.
	Rand *rand.Rand
	// Jobs are the Jobs' run and schedule records, by "ns/name".
	Jobs map[string]jobRecords
	// DaemonRollouts are, by "ns/name", the DaemonServices' node-by-node
	// update records as stored.
	DaemonRollouts map[string]*api.DaemonRolloutRecord
	// DaemonNodeDeadline bounds one node's update; default
	// DefaultDaemonNodeDeadline.
	DaemonNodeDeadline time.Duration
	// Secret returns what is known of a secret (names, keys, version; no
	// value); nil: no secret exists. A workload using a missing secret or
	// key gets no new instance.
	Secret func(ns, name string) (api.SecretInfo, bool)
	// Replace is the back-off between replacements of failed instances
	// (stepReplace); zero fields take their defaults.
	Replace ReplacePolicy
}

// PlanAssignments decides the assignments of every workload in Desired and
// where its new instances run: a Service gets replicas instances, a
// DaemonService one on each eligible node, and a Job runs (jobs.go: its
// records in Jobs say how many instances each run wants; the plan writes the
// records in Jobs); each new instance on a node with an overlay subnet gets a
// free address of it (ipam.Pool: the lowest one not held nor released
// lately). It is pure: nodes, desired state and current assignments in, plan
// out. Workloads are planned in order, each seeing the placements of those
// before it.
//
// Instances are matched by their template (TemplateHash, the spec hash
// without replicas, plus the app commit of a workload built from Git), so
// scaling keeps the running instances, which are never moved for balance. A
// workload whose template changed, or whose app repository moved to a new
// commit, gets new instances first; its old instances are removed on the
// pass that finds enough new ones ready (running, and healthy where a health
// check is defined): start new, then stop old. Should the new ones never get
// there (a failed build), the old ones keep running. Replicas down removes
// surplus instances, those on lost nodes first, then the newest; a deleted
// workload loses them all. A workload whose files do not parse, or built
// from Git whose commit is not resolved yet, keeps what it has.
//
// Nodes: an instance of a Service on a node that is NotReady
// or no longer registered is replaced: its assignment is deleted in the
// plan that places its replacement on a Ready node, and kept while none
// fits (so a partition without room loses nothing), which leaves exactly
// replicas instances on Ready nodes. A Job's unfinished instance there is
// given up as failed and its run retries it within its backoffLimit. A
// DaemonService's is not moved. On a draining node a Service's instances
// are replaced like old ones (removed once the replacements are ready, or
// at once when the rest fit nowhere, so a drain finishes), a
// DaemonService's are removed, and a Job's run to their end.
//
// Failed instances: a Service's or DaemonService's instance its agent
// reports Failed (its restart policy gave up) is deleted and replaced, a
// Service's preferably on another node, a DaemonService's on its node, with
// a back-off per workload kept in its rollout record (stepReplace): the
// first at once, each next one no sooner than the record's NextAt. A Job's
// runs keep their own rules.
func PlanAssignments(in AssignInput) AssignmentPlan {
	byWorkload := map[string][]api.Assignment{}
	for _, a := range in.Current {
		k := a.Namespace + "/" + a.Workload
		byWorkload[k] = append(byWorkload[k], a)
	}
	p := newPlanner(in)
	seen := map[string]bool{}
	for _, w := range in.Desired {
		k := w.Key()
		seen[k] = true
		if w.Spec == nil {
			continue // its files are being replaced: keep what it has
		}
		commit := ""
		if w.Spec.Git != nil {
			if commit = in.Commits[k]; commit == "" {
				continue // not resolved yet: leave it alone
			}
		}
		p.workload(w, commit, byWorkload[k])
	}
	for k, as := range byWorkload {
		if !seen[k] {
			p.plan.Delete = append(p.plan.Delete, as...)
			p.plan.Orphaned = append(p.plan.Orphaned, k)
		}
	}
	slices.Sort(p.plan.Orphaned)
	assignUserNSSlots(in.Current, p.plan.Put, in.SlotUsed)
	sortAssignments(p.plan.Put)
	sortAssignments(p.plan.Delete)
	sortAssignments(p.plan.Leave)
	return p.plan
}

// assignUserNSSlots sets the UserNSSlot of each new assignment: the slot its
// workload's current assignments have, or else the lowest slot no current
// assignment holds, nor slotUsed reports (workloads planned together get
// distinct slots, in order of put). A deleted workload's slot is free once
// its assignments are gone from current, so it is reused on a later pass,
// never the one deleting them. It is pure apart from setting put's slots.
func assignUserNSSlots(current, put []api.Assignment, slotUsed func(int) bool) {
	slotOf := map[string]int{}
	used := map[int]bool{}
	for _, a := range current {
		if a.UserNSSlot == nil {
			continue
		}
		k := a.Namespace + "/" + a.Workload
		if s, ok := slotOf[k]; !ok || *a.UserNSSlot < s {
			slotOf[k] = *a.UserNSSlot
		}
		used[*a.UserNSSlot] = true
	}
	next := 0
	for i := range put {
		k := put[i].Namespace + "/" + put[i].Workload
		s, ok := slotOf[k]
		if !ok {
			for used[next] || (slotUsed != nil && slotUsed(next)) {
				next++
			}
			s = next
			used[s], slotOf[k] = true, s
		}
		put[i].UserNSSlot = &s
	}
}

// replaceStale reports whether the old instances of a workload can go: when
// there are none, when none is wanted, or when as many new instances as
// wanted are ready. It is pure.
func replaceStale(stale, readyFresh, want int) bool {
	return stale > 0 && (want == 0 || readyFresh >= want)
}

func newAssignment(at sched.Placement, ip netip.Addr, req *sched.Request, w workload, commit, tmpl string, now time.Time, suffix string) api.Assignment {
	a := api.Assignment{
		InstanceID: InstanceID(w.Meta.Name, tmpl, suffix), TemplateHash: tmpl,
		CPUMillis: req.CPU, MemoryBytes: req.Memory,
		Node: at.Node, Namespace: w.Meta.Namespace, Workload: w.Meta.Name, Type: w.Meta.Type,
		Generation: w.Meta.Generation, SpecHash: w.Meta.SpecHash, Image: w.Spec.Image,
		Ports: w.Spec.Ports, RestartPolicy: w.Spec.RestartPolicy, SourceCommit: w.Meta.Owner.Commit,
		Files: w.Files, CreatedAt: now, IP: ip,
	}
	if at.GPU >= 0 {
		g := at.GPU
		a.GPU = &g
	}
	if g := w.Spec.Git; g != nil && commit != "" {
		a.Image = api.ImageName(w.Meta.Namespace, w.Meta.Name, commit)
		a.SourceCommit = commit
		a.Build = &api.BuildRef{Repository: g.Repository, Commit: commit}
	}
	return a
}

// InstanceTemplate is what an instance runs: TemplateHash(q), and for a
// workload built from Git the app commit too, so that a new commit makes new
// instances.
func InstanceTemplate(q *quadlet.Quadlet, commit string) string {
	return instanceTemplate(TemplateHash(q), commit)
}

func instanceTemplate(templateHash, commit string) string {
	if commit == "" {
		return templateHash
	}
	sum := sha256.Sum256([]byte(templateHash + "\x00" + commit))
	return hex.EncodeToString(sum[:])
}

// TemplateHash is the spec hash of q without its replica count: what an
// instance runs. Scaling a workload keeps its instances; any other change of
// the spec makes new ones.
func TemplateHash(q *quadlet.Quadlet) string {
	t := *q
	t.Workload.Spec.Replicas = nil
	return t.SpecHash()
}

// maxInstanceID is the longest instance ID: one DNS label, since it names
// the instance's DNS record ({instanceID}.{workload}.{ns}.{domain}).
const maxInstanceID = 63

// InstanceID is {workload}-{first 8 of the instance template}-{suffix}
// (docs/architecture.md "Identity"): a changed spec or app commit is
// visibly a new instance. A workload name too long for that to be a DNS
// label (over 48 characters, with a 5-digit suffix) is cut and followed by
// the first 7 hex digits of its SHA-256, so every valid workload name gives
// a valid label, and two long names that share a beginning do not share
// their instances' prefix.
func InstanceID(workload, specHash, suffix string) string {
	tail := "-" + specHash[:min(8, len(specHash))] + "-" + suffix
	if len(workload)+len(tail) > maxInstanceID {
		sum := sha256.Sum256([]byte(workload))
		hash := "-" + hex.EncodeToString(sum[:])[:7]
		keep := max(0, maxInstanceID-len(tail)-len(hash))
		workload = strings.TrimRight(workload[:min(keep, len(workload))], "-") + hash
	}
	return workload + tail
}

// RandomSuffix returns 5 random hex digits, the unique part of an instance ID.
func RandomSuffix() string {
	var b [3]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])[:5]
}

func sortAssignments(as []api.Assignment) {
	sort.Slice(as, func(i, j int) bool {
		return resources.AssignmentKey(as[i].Node, as[i].InstanceID) < resources.AssignmentKey(as[j].Node, as[j].InstanceID)
	})
}
