package reconcile

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sort"
	"time"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// AssignmentPlan is what the leader writes to /kat/assignments: instances to
// add and instances to remove.
type AssignmentPlan struct {
	Put    []resources.Assignment
	Delete []resources.Assignment
}

// Empty reports whether the plan changes nothing.
func (p AssignmentPlan) Empty() bool { return len(p.Put) == 0 && len(p.Delete) == 0 }

// PlanAssignments decides, until the scheduler exists, the assignments of
// every workload on the single node: a Service gets replicas instances, a Job
// or DaemonService one. It is pure: desired state and current assignments in,
// plan out.
//
// Instances are matched by TemplateHash, the spec hash without replicas, so
// scaling keeps the running instances. A workload whose template changed
// gets new instances first; its old
// instances are removed on the pass that finds enough new ones assigned.
// Replicas down removes the newest surplus instances; a deleted workload
// loses them all. A workload whose files do not parse keeps what it has.
func PlanAssignments(node string, desired []resources.DesiredSpec, current []resources.Assignment, now time.Time, newSuffix func() string) AssignmentPlan {
	byWorkload := map[string][]resources.Assignment{}
	for _, a := range current {
		k := a.Namespace + "/" + a.Workload
		byWorkload[k] = append(byWorkload[k], a)
	}
	var plan AssignmentPlan
	seen := map[string]bool{}
	for _, d := range desired {
		k := d.Meta.Namespace + "/" + d.Meta.Name
		seen[k] = true
		q, err := quadlet.ParseWorkload(d.Files, quadlet.ParseOptions{DefaultNamespace: d.Meta.Namespace})
		if err != nil || q.Workload.Spec.Source.Image == "" {
			// Unparseable (cannot happen for stored specs) or built from
			// Git, which needs the build pipeline: leave it alone.
			continue
		}
		planWorkload(&plan, node, d, q, byWorkload[k], now, newSuffix)
	}
	for k, as := range byWorkload {
		if !seen[k] {
			plan.Delete = append(plan.Delete, as...)
		}
	}
	sortAssignments(plan.Put)
	sortAssignments(plan.Delete)
	return plan
}

func planWorkload(plan *AssignmentPlan, node string, d resources.DesiredSpec, q *quadlet.Quadlet, cur []resources.Assignment, now time.Time, newSuffix func() string) {
	want := resources.DesiredInstances(q)
	tmpl := TemplateHash(q)
	var fresh, stale []resources.Assignment
	for _, a := range cur {
		if a.TemplateHash == tmpl {
			fresh = append(fresh, a)
		} else {
			stale = append(stale, a)
		}
	}
	sortAssignments(fresh)
	for i := len(fresh); i < want; i++ {
		plan.Put = append(plan.Put, newAssignment(node, d, q, now, newSuffix()))
	}
	if len(fresh) > want {
		// Keep the oldest: they are the most likely to be running.
		slices.SortStableFunc(fresh, func(a, b resources.Assignment) int { return a.CreatedAt.Compare(b.CreatedAt) })
		plan.Delete = append(plan.Delete, fresh[want:]...)
	}
	if len(fresh) >= want {
		plan.Delete = append(plan.Delete, stale...)
	}
}

func newAssignment(node string, d resources.DesiredSpec, q *quadlet.Quadlet, now time.Time, suffix string) resources.Assignment {
	var ports []int
	if q.LoadBalancer != nil {
		for _, p := range q.LoadBalancer.Spec.Ports {
			ports = append(ports, p.ContainerPort)
		}
	}
	return resources.Assignment{
		InstanceID: InstanceID(d.Meta.Name, TemplateHash(q), suffix), TemplateHash: TemplateHash(q),
		Node: node, Namespace: d.Meta.Namespace, Workload: d.Meta.Name, Type: d.Meta.Type,
		Generation: d.Meta.Generation, SpecHash: d.Meta.SpecHash, Image: q.Workload.Spec.Source.Image,
		Ports: ports, RestartPolicy: q.Workload.Spec.RestartPolicy.Condition, SourceCommit: d.Meta.Owner.Commit,
		Files: d.Files, CreatedAt: now,
	}
}

// TemplateHash is the spec hash of q without its replica count: what an
// instance runs. Scaling a workload keeps its instances; any other change of
// the spec makes new ones.
func TemplateHash(q *quadlet.Quadlet) string {
	t := *q
	t.Workload.Spec.Replicas = nil
	return t.SpecHash()
}

// InstanceID is {workload}-{first 8 of the template hash}-{suffix} (DESIGN.md
// "Identity"): a changed spec is visibly a new instance.
func InstanceID(workload, specHash, suffix string) string {
	return workload + "-" + specHash[:min(8, len(specHash))] + "-" + suffix
}

// RandomSuffix returns 5 random hex digits, the unique part of an instance ID.
func RandomSuffix() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])[:5]
}

func sortAssignments(as []resources.Assignment) {
	sort.Slice(as, func(i, j int) bool { return as[i].Key() < as[j].Key() })
}
