package poll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		doneAt   int32 // the check that reports done; 0: never
		failWith error
		wantErr  []string
	}{
		{name: "done at once", doneAt: 1},
		{name: "done after a few checks", doneAt: 4},
		{name: "never done", wantErr: []string{"context deadline exceeded"}},
		{name: "never done, with an error", failWith: errors.New("connection refused"),
			wantErr: []string{"context deadline exceeded", "last: connection refused"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			var n atomic.Int32
			err := Wait(ctx, func() (bool, error) {
				c := n.Add(1)
				return tc.doneAt != 0 && c >= tc.doneAt, tc.failWith
			})
			if len(tc.wantErr) == 0 {
				if err != nil || n.Load() != tc.doneAt {
					t.Fatalf("Wait: %v after %d checks, want nil after %d", err, n.Load(), tc.doneAt)
				}
				return
			}
			if err == nil {
				t.Fatal("Wait returned nil for a condition that never holds")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

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
