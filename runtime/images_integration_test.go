package runtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startRegistry runs Debian's docker-registry on a free loopback port for
// the test and returns its address; it skips the test when the registry is
// not installed.
func startRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Skip("skipping: docker-registry is not installed (run scripts/install-prereqs.sh as root)")
	}
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	conf := filepath.Join(dir, "config.yml")
	must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: %s
http:
  addr: %s
`, filepath.Join(dir, "data"), addr)), 0o644))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "serve", conf)
	must(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait() // killed on purpose
	})
	eventually(t, 20*time.Second, "the registry answers", func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	return addr
}

func TestPodmanImages(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	reg := startRegistry(t)
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
