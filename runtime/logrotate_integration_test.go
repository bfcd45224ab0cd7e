package runtime

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestPodmanLogsRotate: a container whose log is bounded (LogMaxSize) and
// writes about three times the bound keeps at most the bound on the node,
// its newest lines; a follower attached before the first line goes on
// reading across every rotation up to the last line. (Podman 4.3's
// follower may miss a few lines written in the moment of a rotation, so
// the test does not count them.)
func TestPodmanLogsRotate(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	const maxSize = 4096
	spec := testSpec(mark, "logrotate", "sh", "-c", `while [ ! -e /tmp/go ]; do sleep 0.1; done
i=0; while [ $i -lt 200 ]; do echo "line $i of the rotation test, sixty bytes long......."; i=$((i+1)); sleep 0.01; done
echo done; exec sleep 600`)
	spec.LogMaxSize = maxSize
	id, err := pm.RunContainer(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	lines, stop := followLines(t, ctx, pm, id)
	if res, err := pm.Exec(ctx, id, []string{"touch", "/tmp/go"}, 10*time.Second); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec touch: %+v %v", res, err)
	}
	var followed []string
	timeout := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the follower ended after %d lines, before the last one", len(followed))
			}
			followed = append(followed, l)
			done = l == "done"
		case <-timeout:
			t.Fatalf("the follower did not reach the last line within 60s; it read %d lines, the last %q", len(followed), followed[len(followed)-1])
		}
	}
	stop()
	if len(followed) < 3*maxSize/60/2 {
		t.Errorf("the follower read %d lines, fewer than half of what three log files hold", len(followed))
	}

	all, err := pm.Logs(ctx, id, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := io.ReadAll(all)
	_ = all.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The k8s-file driver adds a time and stream to each line it keeps:
	// what Logs returns is less than the file's size.
	if len(kept) > maxSize || !strings.HasSuffix(string(kept), "line 199 of the rotation test, sixty bytes long.......\ndone\n") {
		t.Fatalf("the node kept %d bytes of log (at most %d wanted), ending %q", len(kept), maxSize, kept[max(0, len(kept)-120):])
	}
}
