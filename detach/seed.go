package detach

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// Seed writes into repo, the new control plane of a node that detaches,
// what the node runs: its subnet (its instances keep their addresses), and
// for each workload it runs instances of, the workload (the files of its
// newest assignment, owned by the API; a Service's replicas set to the
// node's instances of it, which the instance template does not cover) and
// those assignments as they are. The leader of the plane then finds every
// instance in place and starts or stops nothing; the agent adopts the
// running containers. A Job's instances are not seeded: their runs belong
// to the cluster (docs/detached.md); the node leaves them running, their
// addresses held. It returns the workloads seeded, as "namespace/name", so
// that LocalWorkloads can tell them from those created while detached, and
// the Job instances left running and their user-namespace slots.
func Seed(ctx context.Context, repo *resources.Repo, node string, subnet netip.Prefix, as []api.Assignment) (seeded, left []string, slots []int, _ error) {
	if subnet.IsValid() {
		if err := repo.SeedNodeSubnet(ctx, node, subnet); err != nil {
			return nil, nil, nil, err
		}
	}
	byWorkload := map[string][]api.Assignment{}
	held := map[netip.Addr]string{}
	for _, a := range as {
		if a.Node != node || a.Leaving() {
			continue
		}
		if a.Type == quadlet.TypeJob {
			left = append(left, a.InstanceID)
			if a.UserNSSlot != nil && !slices.Contains(slots, *a.UserNSSlot) {
				slots = append(slots, *a.UserNSSlot)
			}
			if a.IP.IsValid() {
				held[a.IP] = a.InstanceID
			}
			continue
		}
		k := a.Namespace + "/" + a.Workload
		byWorkload[k] = append(byWorkload[k], a)
	}
	if err := repo.HoldAddresses(ctx, node, held); err != nil {
		return nil, nil, nil, fmt.Errorf("seed the node's Job instances: %w", err)
	}
	slices.Sort(left)
	slices.Sort(slots)
	var put []api.Assignment
	for _, k := range slices.Sorted(maps.Keys(byWorkload)) {
		group := byWorkload[k]
		newest := slices.MaxFunc(group, func(a, b api.Assignment) int {
			return cmp.Or(cmp.Compare(a.Generation, b.Generation), a.CreatedAt.Compare(b.CreatedAt))
		})
		files := newest.Files
		if newest.Type == quadlet.TypeService {
			var err error
			if files, err = quadlet.WithReplicas(files, len(group)); err != nil {
				return nil, nil, nil, fmt.Errorf("seed workload %s: %w", k, err)
			}
		}
		q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: newest.Namespace})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("seed workload %s: %w", k, err)
		}
		if _, err := repo.EnsureNamespace(ctx, q.Namespace(), nil); err != nil {
			return nil, nil, nil, fmt.Errorf("seed workload %s: %w", k, err)
		}
		if _, err := repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: api.APIOwner()}); err != nil {
			return nil, nil, nil, fmt.Errorf("seed workload %s: %w", k, err)
		}
		seeded = append(seeded, k)
		put = append(put, group...)
	}
	if _, err := repo.WriteAssignments(ctx, put, nil); err != nil {
		return nil, nil, nil, fmt.Errorf("seed the node's assignments: %w", err)
	}
	return seeded, left, slots, nil
}

// LocalWorkloads lists the workloads of repo, a detached node's control
// plane, that are not among seeded (Seed's answer): those created while
// detached, with the files of their current generation and their
// instances in service on node of that generation (without files), to
// hand back. A Job's instances are not handed back: its runs are the
// cluster's to make.
func LocalWorkloads(ctx context.Context, repo *resources.Repo, node string, seeded []string) ([]api.HandBackWorkload, error) {
	ws, err := repo.ListWorkloads(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list the workloads created while detached: %w", err)
	}
	as, err := repo.ListAssignmentsWithoutFiles(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("list the instances of the workloads created while detached: %w", err)
	}
	var out []api.HandBackWorkload
	for _, w := range ws {
		if slices.Contains(seeded, w.Namespace+"/"+w.Name) {
			continue
		}
		files, err := repo.ArchivedFiles(ctx, w.Namespace, w.Name, w.Generation)
		if err != nil {
			return nil, fmt.Errorf("read workload %s/%s to hand it back: %w", w.Namespace, w.Name, err)
		}
		hb := api.HandBackWorkload{Namespace: w.Namespace, Name: w.Name, Files: files}
		for _, a := range as {
			if a.Namespace == w.Namespace && a.Workload == w.Name && !a.Leaving() && a.Generation == w.Generation && a.Type != quadlet.TypeJob {
				hb.Instances = append(hb.Instances, a)
			}
		}
		out = append(out, hb)
	}
	return out, nil
}
