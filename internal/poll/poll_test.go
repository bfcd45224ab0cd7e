package poll

import (
	"context"
	"errors"
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
