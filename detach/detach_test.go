package detach

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestWaitLostAndBack: WaitLost returns once the probe has failed for the
// loss time, not while it still succeeds now and then; WaitBack returns
// after the asked answers in a row, a failure in between starting the
// count afresh; both end with their context.
func TestWaitLostAndBack(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	down := errors.New("no member answers")
	// Up for the first 5 tries, then down for good.
	flaky := func(context.Context) error {
		if calls.Add(1) <= 5 {
			return nil
		}
		return down
	}
	if err := WaitLost(t.Context(), flaky, 20*time.Millisecond, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n < 6 {
		t.Fatalf("lost after %d tries, while the first 5 answered", n)
	}

	var tries atomic.Int64
	var failures atomic.Int64
	// ok, fail, ok, ok: back at the 4th try.
	pattern := []bool{true, false, true, true, true}
	back := func(context.Context) error {
		i := tries.Add(1) - 1
		if pattern[min(int(i), len(pattern)-1)] {
			return nil
		}
		return down
	}
	if err := WaitBack(t.Context(), back, time.Millisecond, 2, func(error) { failures.Add(1) }); err != nil {
		t.Fatal(err)
	}
	if n := tries.Load(); n != 4 || failures.Load() != 1 {
		t.Fatalf("back after %d tries with %d failures, want 4 and 1", n, failures.Load())
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	never := func(context.Context) error { return down }
	if err := WaitBack(ctx, never, time.Millisecond, 1, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitBack after its context ended: %v", err)
	}
	if err := WaitLost(ctx, func(context.Context) error { return nil }, time.Hour, time.Millisecond); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitLost after its context ended: %v", err)
	}
}

const webKat = `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: web, namespace: shop}
spec:
  type: Service
  source: {image: localhost/kat-base:latest}
  replicas: 5
  restartPolicy: {condition: Always}
  container: {command: [sleep, "3600"]}
`

// TestSeedAndLocalWorkloads: Seed writes the node's subnet, each workload
// it runs instances of (a Service's replicas set to its instances there,
// its namespace made) and those assignments with their addresses; other
// nodes' and leaving instances are left out, and Job instances are left
// running: named, their addresses held, not seeded. LocalWorkloads lists only
// the workloads created afterwards, with their files and their instances in
// service on the node of their current generation.
func TestSeedAndLocalWorkloads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	repo := resources.New(storetest.New(t))
	files := map[string][]byte{quadlet.WorkloadFile: []byte(webKat)}
	slot := 3
	subnet := netip.MustParsePrefix("10.123.4.0/24")
	mk := func(id, node string, ip string) api.Assignment {
		return api.Assignment{InstanceID: id, Node: node, Namespace: "shop", Workload: "web", Type: quadlet.TypeService,
			Generation: 7, TemplateHash: "t", Files: files, UserNSSlot: &slot, IP: netip.MustParseAddr(ip), CreatedAt: time.Now().UTC()}
	}
	leaving := mk("web-t-00003", "laptop", "10.123.4.4")
	leaving.LeavingAt = time.Now()
	job := mk("batch-t-00001", "laptop", "10.123.4.5")
	job.Workload, job.Type = "batch", quadlet.TypeJob
	as := []api.Assignment{mk("web-t-00001", "laptop", "10.123.4.2"), mk("web-t-00002", "laptop", "10.123.4.3"),
		mk("web-t-00009", "desk", "10.123.9.2"), leaving, job}
	seeded, left, slots, err := Seed(ctx, repo, "laptop", subnet, as)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seeded, []string{"shop/web"}) || !slices.Equal(left, []string{job.InstanceID}) || !slices.Equal(slots, []int{slot}) {
		t.Fatalf("seeded %v, left running %v with slots %v; want shop/web and the Job's instance with slot %d", seeded, left, slots, slot)
	}
	nw, err := repo.GetNodeNetwork(ctx, "laptop")
	if err != nil || nw.Subnet != subnet {
		t.Fatalf("subnet of the node: %+v, %v", nw, err)
	}
	wl, err := repo.GetWorkload(ctx, "shop", "web")
	if err != nil {
		t.Fatal(err)
	}
	b, err := repo.GetManifest(ctx, "shop", "web", quadlet.WorkloadFile)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: b}, quadlet.ParseOptions{})
	if err != nil || *q.Workload.Spec.Replicas != 2 || wl.Owner != api.APIOwner() {
		t.Fatalf("seeded workload: replicas %v, owner %+v, %v", q.Workload.Spec.Replicas, wl.Owner, err)
	}
	got, err := repo.ListAssignments(ctx, "laptop")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range got {
		ids = append(ids, a.InstanceID)
	}
	if slices.Sort(ids); !slices.Equal(ids, []string{"web-t-00001", "web-t-00002"}) {
		t.Fatalf("seeded assignments %v", ids)
	}
	// Their addresses are held: the same address for a new instance is
	// refused.
	for _, ip := range []string{"10.123.4.2", job.IP.String()} {
		clash := mk("web-t-00004", "laptop", ip)
		if _, err := repo.WriteAssignments(ctx, []api.Assignment{clash}, nil); !errors.Is(err, resources.ErrAddressTaken) {
			t.Fatalf("a new instance on a seeded address %s: %v, want ErrAddressTaken", ip, err)
		}
	}

	local, err := LocalWorkloads(ctx, repo, "laptop", seeded)
	if err != nil || len(local) != 0 {
		t.Fatalf("local workloads right after the seed: %v, %v", local, err)
	}
	fresh, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: []byte(
		"apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata: {name: fresh, namespace: shop}\nspec: {type: Service, source: {image: busybox:1}, replicas: 1, restartPolicy: {condition: Always}, container: {name: c}}\n")}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: fresh, Owner: api.APIOwner()}); err != nil {
		t.Fatal(err)
	}
	// Its instances: one in service on the node (handed back), one
	// leaving and one of an older generation (not).
	mkFresh := func(id, ip string, gen int64) api.Assignment {
		a := mk(id, "laptop", ip)
		a.Workload, a.Generation = "fresh", gen
		return a
	}
	running, old := mkFresh("fresh-t-00001", "10.123.4.9", 1), mkFresh("fresh-t-00000", "10.123.4.8", 0)
	gone := mkFresh("fresh-t-00002", "10.123.4.10", 1)
	gone.LeavingAt = time.Now()
	if _, err := repo.WriteAssignments(ctx, []api.Assignment{running, old, gone}, nil); err != nil {
		t.Fatal(err)
	}
	local, err = LocalWorkloads(ctx, repo, "laptop", seeded)
	if err != nil || len(local) != 1 || local[0].Name != "fresh" || local[0].Namespace != "shop" ||
		string(local[0].Files[quadlet.WorkloadFile]) != string(fresh.Files[quadlet.WorkloadFile]) {
		t.Fatalf("local workloads: %+v, %v", local, err)
	}
	if in := local[0].Instances; len(in) != 1 || in[0].InstanceID != running.InstanceID || in[0].IP != running.IP || *in[0].UserNSSlot != slot {
		t.Fatalf("instances handed back: %+v, want only %s as it is", in, running.InstanceID)
	}
}
