package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPodmanExecInteractive runs commands with input, with a terminal and
// past their context in a real container.
func TestPodmanExecInteractive(t *testing.T) {
	pm, mark := podmanForTest(t)
	ctx := testCtx(t)
	id, err := pm.RunContainer(ctx, testSpec(mark, "exec-it", "sleep", "600"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code, err := pm.ExecInteractive(ctx, id, []string{"sh", "-c", "cat; echo oops >&2; exit 7"},
		ExecIO{Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errOut})
	if err != nil || code != 7 || out.String() != "from stdin\n" || errOut.String() != "oops\n" {
		t.Fatalf("exec with input: %d, %v, stdout %q, stderr %q", code, err, out.String(), errOut.String())
	}

	// On a terminal: the command sees one, of the size the caller sent,
	// and its output (stderr too) comes on stdout.
	out.Reset()
	resize := make(chan TermSize, 1)
	resize <- TermSize{Rows: 33, Cols: 101}
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan error, 1)
	go func() {
		c, err := pm.ExecInteractive(ctx, id, []string{"sh", "-c", "read line; test -t 0 && stty size && echo \"got $line\" >&2"},
			ExecIO{Stdin: pr, Stdout: &lockedBuffer{b: &out}, Stderr: io.Discard, TTY: true, Resize: resize})
		if err == nil && c != 0 {
			err = fmt.Errorf("exit status %d", c)
		}
		done <- err
	}()
	if _, err := pw.Write([]byte("typed\r")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exec on a terminal: %v (output %q)", err, out.String())
		}
	case <-ctx.Done():
		t.Fatal("exec on a terminal did not end")
	}
	if got := out.String(); !strings.Contains(got, "33 101") || !strings.Contains(got, "got typed") {
		t.Fatalf("terminal output %q, want the size 33 101 and the typed line", got)
	}

	// A context that ends kills the command inside the container.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		_, err := pm.ExecInteractive(cctx, id, []string{"sleep", "432"}, ExecIO{Stdout: io.Discard, Stderr: io.Discard})
		ended <- err
	}()
	eventually(t, 20*time.Second, "the command runs", func() (bool, error) {
		res, err := pm.Exec(ctx, id, []string{"ps", "-o", "args"}, 10*time.Second)
		return err == nil && strings.Contains(string(res.Output), "sleep 432"), err
	})
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("exec cancelled: %v", err)
	}
	eventually(t, 10*time.Second, "the cancelled command is killed", func() (bool, error) {
		res, err := pm.Exec(ctx, id, []string{"ps", "-o", "args"}, 10*time.Second)
		return err == nil && !strings.Contains(string(res.Output), "sleep 432"), err
	})
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
