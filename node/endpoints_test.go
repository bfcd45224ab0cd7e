package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kat.dws.rip/kat/internal/poll/polltest"
)

// TestRecordEndpoints: the etcd URLs a worker's client learns are saved
// once each time they change, sorted, and a failed save is tried again.
func TestRecordEndpoints(t *testing.T) {
	t.Parallel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"https://10.0.0.1:2379"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var (
		mu    sync.Mutex
		saves [][]string
		fail  = 1 // the first save of the new URLs fails
	)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- recordEndpoints(ctx, cli, []string{"https://10.0.0.1:2379"}, 10*time.Millisecond, func(eps []string) error {
			mu.Lock()
			defer mu.Unlock()
			saves = append(saves, eps)
			if fail > 0 {
				fail--
				return errors.New("disk full")
			}
			return nil
		})
	}()
	saved := func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(saves)
	}
	time.Sleep(50 * time.Millisecond) //nolint:forbidigo // what is checked is that nothing happens
	if got := saved(); len(got) != 0 {
		t.Fatalf("saved %v while the URLs were those of node.json", got)
	}
	cli.SetEndpoints("https://10.0.0.3:2379", "https://10.0.0.1:2379", "https://10.0.0.2:2379")
	want := []string{"https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"}
	polltest.Until(t, 10*time.Second, "the new URLs saved after a failed save", func() bool { return len(saved()) >= 2 })
	time.Sleep(50 * time.Millisecond) //nolint:forbidigo // and not again
	got := saved()
	if len(got) != 2 || !slices.Equal(got[0], want) || !slices.Equal(got[1], want) {
		t.Errorf("saves %v, want %v twice (the first failed)", got, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("recordEndpoints: %v", err)
	}
}
