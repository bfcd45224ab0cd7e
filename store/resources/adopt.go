package resources

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store"
)

// ErrSlotTaken means an instance to adopt has a user-namespace slot that an
// instance of another workload holds: its containers could not keep their
// uid map. Nothing was written.
var ErrSlotTaken = errors.New("resources: user-namespace slot held by another workload")

// adoptWrites are the checks and writes that record, with a workload
// being created (meta), the instances of it that run already (ApplyRequest
// Adopt): each as an assignment of meta's generation, spec hash and q's
// files, its address recorded as WriteAssignments records it. It refuses
// (ErrAddressTaken, ErrSlotTaken, nothing written) an instance whose
// address is held on its node, or whose slot an instance of another
// workload holds.
func (r *Repo) adoptWrites(ctx context.Context, q *quadlet.Quadlet, meta api.WorkloadMeta, adopt []api.Assignment) ([]store.Compare, []store.Op, error) {
	if len(adopt) == 0 {
		return nil, nil, nil
	}
	others, err := r.ListAssignmentsWithoutFiles(ctx, "")
	if err != nil {
		return nil, nil, err
	}
	var checks []store.Compare
	var ops []store.Op
	for _, a := range adopt {
		a.Namespace, a.Workload, a.Type = meta.Namespace, meta.Name, meta.Type
		a.Generation, a.SpecHash, a.Files = meta.Generation, meta.SpecHash, maps.Clone(q.Files)
		if a.UserNSSlot != nil {
			for _, o := range others {
				if o.UserNSSlot != nil && *o.UserNSSlot == *a.UserNSSlot && (o.Namespace != a.Namespace || o.Workload != a.Workload) {
					return nil, nil, fmt.Errorf("adopt instance %s: slot %d of %s/%s: %w", a.InstanceID, *a.UserNSSlot, o.Namespace, o.Workload, ErrSlotTaken)
				}
			}
		}
		op, err := putJSON(AssignmentKey(a.Node, a.InstanceID), a)
		if err != nil {
			return nil, nil, err
		}
		ops = append(ops, op)
		if !a.IP.IsValid() {
			continue
		}
		k := IPAMKey(a.Node, a.IP)
		if _, err := r.st.Get(ctx, k); err == nil {
			return nil, nil, fmt.Errorf("adopt instance %s: %s on node %s: %w", a.InstanceID, a.IP, a.Node, ErrAddressTaken)
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, nil, fmt.Errorf("adopt instance %s: read %s: %w", a.InstanceID, k, err)
		}
		checks = append(checks, store.Compare{Key: k, ExpectedVersion: 0})
		ops = append(ops, store.Op{Type: store.OpPut, Key: k, Value: []byte(a.InstanceID)})
	}
	return checks, ops, nil
}
