package apiserver_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// TestDetachedPinsAppliedWorkloads: on a detached node's API a workload
// applied gets the nodeSelector kat.dws.rip/nodeName: NODE in its
// workload.kat (shown by get), status says detached, since when and from
// which cluster, and a workload selecting another node is refused (422)
// writing nothing. Before the record exists nothing is pinned.
func TestDetachedPinsAppliedWorkloads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	ctx := t.Context()
	if _, err := f.client.ApplyWorkload(ctx, "default", "before", archiveOf(t, map[string]string{"workload.kat": workloadKat("before", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, err := f.client.GetWorkloadFile(ctx, "default", "before", quadlet.WorkloadFile); err != nil || strings.Contains(string(b), resources.NodeNameLabel) {
		t.Fatalf("a cluster that is no detached node pinned a workload: %s %v", b, err)
	}
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if err := f.repo.SetDetached(ctx, api.Detached{Node: "laptop", Since: since, ParentCluster: "home", ParentClusterUID: "u1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "web", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "", 1)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	wl, err := f.client.GetWorkload(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.client.GetWorkloadFile(ctx, "default", "web", quadlet.WorkloadFile)
	if err != nil {
		t.Fatal(err)
	}
	q, err := quadlet.ParseWorkload(map[string][]byte{quadlet.WorkloadFile: b}, quadlet.ParseOptions{})
	if err != nil || q.Workload.Spec.NodeSelector[resources.NodeNameLabel] != "laptop" {
		t.Fatalf("workload.kat of an apply to the detached node (generation %d): %v\n%s", wl.Generation, err, b)
	}
	st, err := f.client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := st.Detached; d == nil || d.Node != "laptop" || !d.Since.Equal(since) || d.ParentCluster != "home" {
		t.Fatalf("status of a detached node: %+v", st.Detached)
	}

	before := f.snapshot(t)
	other := strings.Replace(workloadKat("elsewhere", "", 1), "  replicas: 1\n", "  replicas: 1\n  nodeSelector: {kat.dws.rip/nodeName: desk}\n", 1)
	code, e := f.raw(t, "PUT", "/v1alpha1/n/default/workloads/elsewhere", token, archiveOf(t, map[string]string{"workload.kat": other}))
	if code != 422 || !strings.Contains(e.Message, "detached") {
		t.Fatalf("a workload selecting another node: %d %+v, want 422 saying why", code, e)
	}
	if f.snapshot(t) != before {
		t.Fatal("a refused apply changed the state")
	}
}

// TestHandBack: a rejoining node hands back the workloads it created while
// detached: one pinned to it is applied (API-owned) with its running
// instance recorded as its assignment as it is (ID, address, slot; the
// cluster's generation and files), a repeat of the same is accepted again
// without a new generation, one whose instance's slot another workload
// holds is applied without it (NotAdopted), one whose name the cluster
// uses is reported as a conflict and the cluster's left as it was, and one
// not pinned to the node, or with an instance that is not the node's,
// refuses the whole hand-back (400) writing nothing; another node's
// certificate cannot hand back for it.
func TestHandBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	cs := nodeClients(t, f, nil, "laptop", "desk")
	laptop, desk := cs[0], cs[1]
	ctx := t.Context()
	pinned := func(name string, replicas int) map[string][]byte {
		files, err := quadlet.WithNodeSelector(map[string][]byte{quadlet.WorkloadFile: []byte(workloadKat(name, "", replicas))}, resources.NodeNameLabel, "laptop")
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "taken", archiveOf(t, map[string]string{"workload.kat": workloadKat("taken", "", 2)}), apiclient.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	takenBefore, err := f.repo.GetWorkload(ctx, "default", "taken")
	if err != nil {
		t.Fatal(err)
	}
	subnet := netip.MustParsePrefix("10.77.3.0/24")
	if err := f.repo.SeedNodeSubnet(ctx, "laptop", subnet); err != nil {
		t.Fatal(err)
	}
	// The cluster's "taken" holds slot 4 on desk.
	slot := func(n int) *int { return &n }
	if _, err := f.repo.WriteAssignments(ctx, []api.Assignment{{InstanceID: "taken-aaaaaaaa-00001", Node: "desk", Namespace: "default",
		Workload: "taken", Type: quadlet.TypeService, Generation: 1, UserNSSlot: slot(4)}}, nil); err != nil {
		t.Fatal(err)
	}
	instance := func(name, id, ip string, s int) api.Assignment {
		return api.Assignment{InstanceID: id, Node: "laptop", Namespace: "default", Workload: name, Type: quadlet.TypeService,
			Generation: 3, TemplateHash: "0123456789abcdef", IP: netip.MustParseAddr(ip), UserNSSlot: slot(s), CreatedAt: time.Now().UTC()}
	}
	mine := instance("local", "local-01234567-00001", "10.77.3.7", 1)
	hb := api.HandBack{Workloads: []api.HandBackWorkload{
		{Namespace: "default", Name: "local", Files: pinned("local", 1), Instances: []api.Assignment{mine}},
		{Namespace: "default", Name: "slotless", Files: pinned("slotless", 1), Instances: []api.Assignment{instance("slotless", "slotless-01234567-00001", "10.77.3.8", 4)}},
		{Namespace: "default", Name: "taken", Files: pinned("taken", 1)},
	}}
	for round := range 2 {
		res, err := laptop.HandBack(ctx, "laptop", hb)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Accepted) != 2 || res.Accepted[0] != "default/local" || res.Accepted[1] != "default/slotless" ||
			len(res.Conflicts) != 1 || res.Conflicts[0].Workload != "default/taken" {
			t.Fatalf("round %d: hand-back result %+v", round, res)
		}
		if _, ok := res.NotAdopted["default/slotless"]; round == 0 && (len(res.NotAdopted) != 1 || !ok) {
			t.Fatalf("hand-back of an instance whose slot the cluster gave out: not adopted %v, want default/slotless", res.NotAdopted)
		}
		wl, err := f.repo.GetWorkload(ctx, "default", "local")
		if err != nil || wl.Generation != 1 || wl.Owner != api.APIOwner() {
			t.Fatalf("round %d: handed-back workload %+v, %v", round, wl, err)
		}
		as, err := f.repo.ListAssignments(ctx, "laptop")
		if err != nil {
			t.Fatal(err)
		}
		if len(as) != 1 {
			t.Fatalf("round %d: assignments of laptop %+v, want local's one instance", round, as)
		}
		a := as[0]
		if a.InstanceID != mine.InstanceID || a.IP != mine.IP || *a.UserNSSlot != 1 || a.Generation != 1 || a.SpecHash != wl.SpecHash ||
			a.TemplateHash != mine.TemplateHash || string(a.Files[quadlet.WorkloadFile]) != string(hb.Workloads[0].Files[quadlet.WorkloadFile]) {
			t.Fatalf("round %d: the adopted instance %+v, want %s as the node runs it, of the cluster's generation 1", round, a, mine.InstanceID)
		}
		taken, err := f.repo.GetWorkload(ctx, "default", "taken")
		if err != nil || taken.SpecHash != takenBefore.SpecHash || taken.Generation != takenBefore.Generation {
			t.Fatalf("round %d: a conflict changed the cluster's workload: %+v, %v", round, taken, err)
		}
	}

	before := f.snapshot(t)
	bad := api.HandBack{Workloads: []api.HandBackWorkload{
		{Namespace: "default", Name: "other", Files: pinned("other", 1)},
		{Namespace: "default", Name: "loose", Files: map[string][]byte{quadlet.WorkloadFile: []byte(workloadKat("loose", "", 1))}},
	}}
	var apiErr *api.Error
	if _, err := laptop.HandBack(ctx, "laptop", bad); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(err.Error(), "nodeSelector") {
		t.Fatalf("hand-back of a workload not pinned to the node: %v, want 400 naming the nodeSelector", err)
	}
	deskOne := instance("other", "other-01234567-00001", "10.77.3.9", 2)
	deskOne.Node = "desk"
	outside := instance("other", "other-01234567-00002", "10.78.0.9", 2)
	for _, tc := range []struct {
		name string
		in   api.Assignment
		want string
	}{
		{"another node's instance", deskOne, "instances[0].node"},
		{"an address outside the node's subnet", outside, "outside node laptop's subnet"},
	} {
		bad := api.HandBack{Workloads: []api.HandBackWorkload{{Namespace: "default", Name: "other", Files: pinned("other", 1), Instances: []api.Assignment{tc.in}}}}
		if _, err := laptop.HandBack(ctx, "laptop", bad); !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("hand-back of %s: %v, want 400 saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := desk.HandBack(ctx, "laptop", hb); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("another node hands back for laptop: %v, want 401", err)
	}
	if f.snapshot(t) != before {
		t.Fatal("a refused hand-back changed the state")
	}
}
