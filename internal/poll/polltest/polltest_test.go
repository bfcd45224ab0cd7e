package polltest

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a Fatalf instead of stopping.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

func TestUntilNamesWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	UntilErr(r, 30*time.Millisecond, "the answer", func() error { return errors.New("no answer yet") })
	if !strings.Contains(r.msg, "the answer") || !strings.Contains(r.msg, "no answer yet") {
		t.Fatalf("UntilErr's failure %q does not name what it waited for and the last error", r.msg)
	}
	ok := &recorder{TB: t}
	Until(ok, time.Second, "true", func() bool { return true })
	if ok.msg != "" {
		t.Fatalf("Until failed on a condition that holds: %s", ok.msg)
	}
}

func TestUntilEvery(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ok := &recorder{TB: t}
	UntilEvery(ok, 10*time.Second, time.Millisecond, "the third check", func() bool { return n.Add(1) == 3 })
	if ok.msg != "" || n.Load() != 3 {
		t.Fatalf("UntilEvery: %q after %d checks, want success at the third", ok.msg, n.Load())
	}
	never := &recorder{TB: t}
	UntilEvery(never, 20*time.Millisecond, time.Millisecond, "never", func() bool { return false })
	if !strings.Contains(never.msg, "never") {
		t.Fatalf("UntilEvery's failure %q does not name what it waited for", never.msg)
	}
}
