package apiserver_test

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/store/resources"
)

// TestStatusReportsRecordTheOverlay: a node's status report with its
// WireGuard key and port reaches Config.NodeOverlay the first time and
// when it changes, not on every beat; a failed call is retried with the
// next report; an invalid key or port is a 400 naming the field and records
// nothing.
func TestStatusReportsRecordTheOverlay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var calls []api.NodeOverlay
	fail := true
	f := newFixture(t, func(c *apiserver.Config) {
		c.NodeOverlay = func(_ context.Context, node string, o api.NodeOverlay) error {
			mu.Lock()
			defer mu.Unlock()
			if node != "n1" {
				t.Errorf("NodeOverlay called for %q", node)
			}
			calls = append(calls, o)
			if fail {
				fail = false
				return resources.ErrConflict
			}
			return nil
		}
	})
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", AdvertiseAddress: "192.0.2.1", AgentPort: 9116}); err != nil {
		t.Fatal(err)
	}
	key, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	ov := api.NodeOverlay{PublicKey: key.PublicKey().String(), Port: 51820}
	report := func(o *api.NodeOverlay) error {
		return f.client.PostNodeStatus(ctx, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), Overlay: o})
	}
	if err := report(&ov); err == nil {
		t.Fatal("a report whose overlay could not be recorded succeeded")
	}
	for range 3 {
		if err := report(&ov); err != nil {
			t.Fatal(err)
		}
	}
	moved := ov
	moved.Port = 51821
	if err := report(&moved); err != nil {
		t.Fatal(err)
	}
	if err := report(nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]api.NodeOverlay(nil), calls...)
	mu.Unlock()
	if want := []api.NodeOverlay{ov, ov, moved}; !reflect.DeepEqual(got, want) {
		t.Errorf("NodeOverlay calls %v, want %v (failed, retried, changed)", got, want)
	}

	for _, tc := range []struct {
		name string
		o    api.NodeOverlay
		want string
	}{
		{"not a key", api.NodeOverlay{PublicKey: "hello", Port: 51820}, "overlay.publicKey"},
		{"no port", api.NodeOverlay{PublicKey: ov.PublicKey}, "overlay.port"},
		{"port without key", api.NodeOverlay{Port: 51820}, "overlay.port"},
	} {
		o := tc.o
		code, apiErr := f.raw(t, http.MethodPost, "/v1alpha1/nodes/n1/status", token,
			mustJSON(t, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), Overlay: &o}))
		if code != http.StatusBadRequest || len(apiErr.Details) == 0 || !strings.Contains(apiErr.Details[0].Field, tc.want) {
			t.Errorf("%s: %d %+v, want 400 naming %s", tc.name, code, apiErr, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Errorf("refused reports called NodeOverlay: %v", calls[3:])
	}
}

// TestStatusReportsUsage: a report's usage sample (with its overlay peers)
// is served with the node; a sample with a negative counter or a container
// without an instance is a 400 naming the field and records nothing.
func TestStatusReportsUsage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	if err := f.repo.PutNodeRegistration(ctx, api.NodeRegistration{Name: "n1", AdvertiseAddress: "192.0.2.1", AgentPort: 9116}); err != nil {
		t.Fatal(err)
	}
	hs := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	good := api.NodeUsage{SampledAt: 100, ResourceUsage: api.ResourceUsage{CPUMillis: 250, MemoryBytes: 1 << 30},
		Containers:   []api.ContainerUsage{{Namespace: "default", Workload: "web", InstanceID: "web-1", ResourceUsage: api.ResourceUsage{CPUMillis: 10}}},
		OverlayPeers: []api.OverlayPeer{{Node: "n2", PublicKey: "k", Endpoint: "192.0.2.2:51820", LastHandshake: hs, RxBytes: 5}}}
	post := func(u api.NodeUsage) (int, api.Error) {
		return f.raw(t, http.MethodPost, "/v1alpha1/nodes/n1/status", token,
			mustJSON(t, api.NodeStatus{NodeName: "n1", Timestamp: time.Now().Unix(), Usage: &u}))
	}
	if code, apiErr := post(good); code != http.StatusNoContent {
		t.Fatalf("a good sample: %d %+v", code, apiErr)
	}
	nodes, err := f.repo.ListNodes(ctx)
	if err != nil || len(nodes) != 1 || !reflect.DeepEqual(nodes[0].Status.Usage, &good) {
		t.Fatalf("nodes %+v, %v; want n1 with the sample", nodes, err)
	}
	for _, tc := range []struct {
		name   string
		change func(*api.NodeUsage)
		want   string
	}{
		{"negative cpu", func(u *api.NodeUsage) { u.CPUMillis = -1 }, "usage.cpuMillis: -1 is negative"},
		{"container without an instance", func(u *api.NodeUsage) { u.Containers[0].InstanceID = "" }, "usage.containers[0].instanceID"},
		{"negative container bytes", func(u *api.NodeUsage) { u.Containers[0].NetworkTxBytes = -5 }, "usage.containers[0].networkTxBytes: -5 is negative"},
	} {
		u := good
		u.Containers = slices.Clone(good.Containers)
		tc.change(&u)
		if code, apiErr := post(u); code != http.StatusBadRequest || !strings.Contains(apiErr.Message, tc.want) {
			t.Errorf("%s: %d %+v, want 400 saying %q", tc.name, code, apiErr, tc.want)
		}
	}
	if nodes, err := f.repo.ListNodes(ctx); err != nil || !reflect.DeepEqual(nodes[0].Status.Usage, &good) {
		t.Errorf("after refused samples: %+v, %v; want the good one kept", nodes[0].Status.Usage, err)
	}
}
