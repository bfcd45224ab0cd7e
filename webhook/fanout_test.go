package webhook

import (
	"context"
	"errors"
	"testing"
)

func TestFanout(t *testing.T) {
	t.Parallel()
	count := func(n int, err error) (Dispatcher, *int) {
		calls := 0
		return DispatcherFunc(func(context.Context, Push) (int, error) { calls++; return n, err }), &calls
	}
	boom := errors.New("boom")
	tests := []struct {
		name    string
		counts  []int
		errs    []error
		want    int
		wantErr bool
	}{
		{name: "neither matches", counts: []int{0, 0}, errs: []error{nil, nil}, want: 0},
		{name: "config source only", counts: []int{1, 0}, errs: []error{nil, nil}, want: 1},
		{name: "app repository only", counts: []int{0, 2}, errs: []error{nil, nil}, want: 2},
		{name: "both", counts: []int{1, 2}, errs: []error{nil, nil}, want: 3},
		{name: "a failing one does not hide the other", counts: []int{0, 1}, errs: []error{boom, nil}, want: 1, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ds []Dispatcher
			var calls []*int
			for i := range tc.counts {
				d, c := count(tc.counts[i], tc.errs[i])
				ds, calls = append(ds, d), append(calls, c)
			}
			n, err := Fanout(ds...).DispatchPush(context.Background(), Push{})
			if n != tc.want || (err != nil) != tc.wantErr {
				t.Fatalf("DispatchPush = %d, %v; want %d, error %v", n, err, tc.want, tc.wantErr)
			}
			for i, c := range calls {
				if *c != 1 {
					t.Fatalf("dispatcher %d called %d times", i, *c)
				}
			}
		})
	}
}
