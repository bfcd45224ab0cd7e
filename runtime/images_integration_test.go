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
	if got, err := pm.ImageID(ctx, ref); err != nil || got != id {
		t.Fatalf("ID of the pulled image: %q, %v; want %q", got, err, id)
	}

	// Another name for it, and that name dropped again.
	local := "kat-local/kat-rt-test_" + mark + ":abc"
	must(t, pm.TagImage(ctx, ref, local))
	t.Cleanup(func() { _ = pm.RemoveImage(context.Background(), local) })
	if got, err := pm.ImageID(ctx, local); err != nil || got != id {
		t.Fatalf("ID of the tagged name: %q, %v; want %q", got, err, id)
	}
	must(t, pm.UntagImage(ctx, ref))
	if ok, err := pm.ImageExists(ctx, ref); err != nil || ok {
		t.Fatalf("after untag: %s exists %v, %v", ref, ok, err)
	}
	if ok, err := pm.ImageExists(ctx, local); err != nil || !ok {
		t.Fatalf("after untag of the other name: %s exists %v, %v", local, ok, err)
	}
	if err := pm.TagImage(ctx, "localhost/kat-no-such-image:"+mark, local); !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("tag of an absent image: %v, want ErrImageNotFound", err)
	}

	// A pull that reports its progress.
	var progress strings.Builder
	if _, err := pm.PullImage(ctx, ref, PullOptions{TLSVerify: &noVerify, Progress: &progress}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "Copying") {
		t.Fatalf("pull progress %q", progress.String())
	}

	_, err = pm.PullImage(ctx, reg+"/kat-rt-test-"+mark+"-absent:v1", PullOptions{TLSVerify: &noVerify})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "podman pull") {
		t.Fatalf("pulling an absent image: got %v, want ErrImageNotFound naming podman pull", err)
	}
	if _, err := pm.PullImage(ctx, " ", PullOptions{}); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("pulling an empty reference: got %v, want ErrInvalidSpec", err)
	}
}
