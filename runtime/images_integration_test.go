package runtime

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"kat.dws.rip/kat/internal/testenv"
)

func TestPodmanImages(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{}).Host
	ref := reg + "/kat-rt-test-" + mark + ":v1"
	podman := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "podman", append(pm.GlobalArgs(), args...)...).CombinedOutput(); err != nil {
			t.Fatalf("podman %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	podman("tag", baseImage, ref)
	t.Cleanup(func() { _ = pm.RemoveImage(context.Background(), ref) })
	podman("push", "--quiet", "--tls-verify=false", ref)
	must(t, pm.RemoveImage(ctx, ref))
	if ok, err := pm.ImageExists(ctx, ref); err != nil || ok {
		t.Fatalf("after remove: exists %v, %v", ok, err)
	}
	if err := pm.RemoveImage(ctx, ref); !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("removing an absent image: got %v, want ErrImageNotFound", err)
	}

	noVerify := false
	id, err := pm.PullImage(ctx, ref, PullOptions{TLSVerify: &noVerify})
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("pull returned %q, want an image ID", id)
	}
	if ok, err := pm.ImageExists(ctx, ref); err != nil || !ok {
		t.Fatalf("after pull: exists %v, %v", ok, err)
	}

	_, err = pm.PullImage(ctx, reg+"/kat-rt-test-"+mark+"-absent:v1", PullOptions{TLSVerify: &noVerify})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "podman pull") {
		t.Fatalf("pulling an absent image: got %v, want ErrImageNotFound naming podman pull", err)
	}
	if _, err := pm.PullImage(ctx, " ", PullOptions{}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("pulling an empty reference: got %v, want ErrInvalidSpec", err)
	}
}
