package e2e

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/testenv"
)

// TestPushToDeployCache: with build.kat cache.registryPath on a real
// registry on loopback, the first node builds and pushes; a second node with
// a fresh image store pulls the image from the cache, does not build, and
// its build record says cacheHit.
func TestPushToDeployCache(t *testing.T) {
	t.Parallel()
	requireBuild(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{}).Host
	app := newGitRemoteNamed(t, "app")
	c1 := app.Commit("v1", map[string]string{"Dockerfile": appDockerfile, "index.html": "cached v1\n"})
	cfg := newGitRemote(t)
	wl := "p2dc-" + randomHex(3)
	cfg.Commit("add "+wl, appWorkloadFiles(t, wl, app.url, reg+"/cache/"+wl))
	t.Cleanup(func() { removeLocalImages(wl) })
	image := "kat-local/default_" + wl + ":" + c1[:12]
	ref := "default/" + wl

	first := startPushCluster(t, cfg, "", "--insecure-registry", reg)
	d := waitStatus(t, first.Cluster, ref, "built on the first node", func(d *api.WorkloadDetail) bool {
		return onlyImage(d, image) && len(d.Builds) == 1 && d.Builds[0].State == "Succeeded"
	})
	if b := d.Builds[0]; b.CacheHit || len(b.Warnings) != 0 {
		t.Fatalf("first node's build %+v: want a build pushed to the cache without warnings", b)
	}

	store := t.TempDir()
	second := startPushCluster(t, cfg, store, "--insecure-registry", reg)
	d = waitStatus(t, second.Cluster, ref, "served on the second node", func(d *api.WorkloadDetail) bool {
		return onlyImage(d, image) && len(d.Builds) == 1 && d.Builds[0].State == "Succeeded"
	})
	if b := d.Builds[0]; !b.CacheHit || b.Node != second.Node {
		t.Fatalf("second node's build record %+v: want cacheHit by %s", b, second.Node)
	}
	if r := second.Katcall(t.Context(), "logs", ref, "--build"); r.Code != 0 || !bytes.Contains([]byte(r.Stdout), []byte("cache")) {
		t.Errorf("katcall logs --build on the second node: %s", r)
	}
	// Two Podman stores on one machine allocate container IPs on the same
	// bridge independently, so the second node's published port is not
	// reliable here; ask its container itself.
	in := d.Instances[0]
	if len(in.Status.Ports) != 1 {
		t.Fatalf("second node's instance ports %+v", in.Status.Ports)
	}
	out, err := exec.Command("podman", append(storeArgs(store), "exec", in.Status.ContainerID,
		"wget", "-q", "-O", "-", fmt.Sprintf("http://127.0.0.1:%d/", in.Status.Ports[0].ContainerPort))...).CombinedOutput()
	if err != nil || string(out) != "cached v1\n" {
		t.Fatalf("second node's container serves %q, %v", out, err)
	}
}
